"""Servers a killed test run left behind, found and stopped when the next run starts.

A run that ends normally stops what it started (fixtures, stop_process). One killed
outright (SIGKILL, a CI timeout, a closed terminal) cannot: its Prometheus, vmagent,
uvicorn and `mac start master` supervisors keep their ports and memory, and the next
runs find a busier machine. So each run marks its environment with its own identity
(MARK: the pid and start time of the pytest process that began it; xdist's workers and
every server they start inherit it), and a run that starts stops every process whose
mark names a run that is gone. A process of a run still going (another checkout's
suite beside this one) is never touched, nor one without the mark.
"""

from __future__ import annotations

import os

import psutil

MARK = "MAC_TEST_RUN"
GRACE = 5.0  # seconds between SIGTERM and SIGKILL


def mark_this_run() -> str:
    """This run's mark, set in this process's environment unless a parent run set it."""
    if not os.environ.get(MARK):
        me = psutil.Process()
        os.environ[MARK] = f"{me.pid}:{me.create_time():.2f}"
    return os.environ[MARK]


def run_is_alive(mark: str) -> bool:
    """Whether the run that `mark` names (its first process) still runs."""
    pid, _, started = mark.partition(":")
    try:
        process = psutil.Process(int(pid))
        return f"{process.create_time():.2f}" == started
    except (ValueError, psutil.NoSuchProcess):
        return False
    except psutil.AccessDenied:
        return True  # cannot tell: leave it


def leftovers(ours: str) -> list[psutil.Process]:
    """Processes marked by a run that is gone (never by `ours`, nor a run still going)."""
    found, verdicts = [], {ours: True}
    for process in psutil.process_iter():
        try:
            mark = process.environ().get(MARK)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
        if not mark:
            continue
        if mark not in verdicts:
            verdicts[mark] = run_is_alive(mark)
        if not verdicts[mark]:
            found.append(process)
    return found


def stop_leftovers(ours: str) -> list[str]:
    """SIGTERM every leftover, SIGKILL those still up after GRACE; what was stopped,
    as "pid command" lines."""
    found = leftovers(ours)
    stopped = []
    for process in found:
        try:
            stopped.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
            process.terminate()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    _, alive = psutil.wait_procs(found, timeout=GRACE)
    for process in alive:
        try:
            process.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return stopped
