"""testkit.frontdoor.Stopped: once inside, every thread of the process is stopped (the
signal is only queued by kill()); on the way out it runs again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testkit.frontdoor import Stopped
from testkit.waiting import wait_for

# Four threads spinning, as a server's would under load.
SPINNER = (
    "import threading\n"
    "def spin():\n"
    "    while True: pass\n"
    "for _ in range(4): threading.Thread(target=spin, daemon=True).start()\n"
    "threading.Event().wait()\n"
)


def _states(pid: int) -> set[str]:
    return {
        (task / "stat").read_text().rpartition(")")[2].split()[0]
        for task in Path(f"/proc/{pid}/task").iterdir()
    }


def test_every_thread_is_stopped_inside_and_runs_again_after():
    process = subprocess.Popen([sys.executable, "-c", SPINNER])
    try:
        wait_for(lambda: len(_states(process.pid)) and len(list(
            Path(f"/proc/{process.pid}/task").iterdir())) == 5, 10, what="its threads")  # fmt: skip
        with Stopped(process.pid):
            assert _states(process.pid) <= {"T", "t"}
        wait_for(lambda: "R" in _states(process.pid), 10, what="its threads running again")
    finally:
        process.kill()
        process.wait()


def test_a_process_that_died_is_no_wait():
    """Dead but not yet reaped (a zombie): nothing of it answers, so nothing to wait for."""
    process = subprocess.Popen(["true"])
    try:
        wait_for(lambda: _states(process.pid) == {"Z"}, 10, what="a zombie")
        with Stopped(process.pid) as stopped:  # else WaitTimeout after its 10 s
            assert stopped.pids == (process.pid,)
    finally:
        process.wait()
