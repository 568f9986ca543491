"""How supervisord starts one service: `python -m maccli.runtimes.launch <spec.json>`.

Why a launcher between supervisord and the service:
- The service's command line and environment come from a JSON file that `mac` writes,
  so nothing has to survive the quoting rules of supervisord's INI file, and a
  supervisord started at boot (systemd, maccli.systemd) gives each service exactly the
  environment `mac start` gave it.
- When the service's main process dies, whatever it leaves behind in its process group
  goes too. A gunicorn master killed with SIGKILL leaves its workers running and holding
  the API port, so every restart then failed with "Address already in use" while the
  orphans went on serving (issue 11, fault 2). supervisord only signals the group when
  *it* stops a program; systemd and Docker clean up on their own (cgroup, PID
  namespace), and this does the same for the process runtime.

The launcher runs in the process group supervisord made for it (supervisord signals
that whole group to stop the program: stopasgroup/killasgroup), starts the service in
it, waits, removes the leftovers and ends as the service ended (its exit status, or
the signal that killed it), so supervisord's restart, backoff and log tell the
service's fate.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil

LEFTOVER_GRACE = 3.0  # seconds leftovers get between SIGTERM and SIGKILL


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, PermissionError):
            continue
    return members


def remove_leftovers(pgid: int, grace: float = LEFTOVER_GRACE) -> list[int]:
    """SIGTERM, then SIGKILL, every other process of our group; returns their pids."""
    members = _group_members(pgid)
    for proc in members:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _gone, alive = psutil.wait_procs(members, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace)
    return [proc.pid for proc in members]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m maccli.runtimes.launch <spec.json>", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        spec = json.load(handle)
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)  # run by hand: make our own group, as supervisord would
    pgid = os.getpgrp()
    # supervisord signals the whole group; the service gets the signal itself. A Python
    # handler (not SIG_IGN, which the service would inherit) keeps us waiting for it.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda *_: None)
    # One line per start in the service's log, as `mac logs` shows it.
    print(f"\n==> {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(spec['argv'])}", flush=True)
    try:
        child = subprocess.Popen(spec["argv"], env=spec["env"], stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"cannot start {spec['argv'][0]}: {exc}", file=sys.stderr, flush=True)
        return 127
    code = child.wait()
    left = remove_leftovers(pgid)
    if left:
        print(
            f"==> {time.strftime('%Y-%m-%dT%H:%M:%S')} {spec.get('name', 'service')} ended "
            f"(status {code}); stopped {len(left)} leftover process(es): "
            f"{', '.join(map(str, left))}",
            flush=True,
        )
    if code < 0:
        # End the way the service ended, so supervisord logs "terminated by SIGKILL".
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those keep no handler anyway
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
