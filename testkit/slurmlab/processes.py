"""The lab's processes: daemons fork away, so they are found by pid file and by a marker.

Every daemon the lab starts, and every job it submits, carries a marker in its
environment valued with the lab's folder (slurmstepd inherits slurmd's environment);
stop() kills what is left of this lab, and only this lab, by it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

DAEMON_MARKER = "MAC_SLURMLAB_DAEMON"
JOB_MARKER = "MAC_SLURMLAB_JOB"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def signal_and_wait(pids: Iterable[int], timeout: float = 10.0) -> None:
    """SIGTERM `pids`, then SIGKILL those still up after `timeout` s; wait for them to go."""
    pids = [pid for pid in pids if alive(pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if alive(pid)]
            if pids:
                time.sleep(0.02)
        if not pids:
            return


def stop_pid_file(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    signal_and_wait([pid])
    pid_file.unlink(missing_ok=True)


def kill_marked(root: str) -> None:
    """Kill every process whose environment carries this lab's daemon or job marker."""
    wanted = {f"{DAEMON_MARKER}={root}".encode(), f"{JOB_MARKER}={root}".encode()}
    marked = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted.intersection(environ):
            marked.append(int(entry.name))
    signal_and_wait(marked, timeout=5)
