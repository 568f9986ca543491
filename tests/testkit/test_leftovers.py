"""testkit.leftovers: what a killed test run left running is stopped by the next run,
and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from testkit.leftovers import MARK, stop_leftovers
from testkit.processes import stop_process
from testkit.waiting import wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _run_mark(process: psutil.Process) -> str:
    return f"{process.pid}:{process.create_time():.2f}"


def _marked(mark: str | None) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != MARK}
    if mark is not None:
        env[MARK] = mark
    return subprocess.Popen(SLEEPER, env=env)


def test_a_gone_runs_servers_are_stopped_and_no_one_elses():
    gone_run = subprocess.Popen([sys.executable, "-c", "pass"])
    gone = _run_mark(psutil.Process(gone_run.pid))
    gone_run.wait()
    live_run = subprocess.Popen(SLEEPER)
    live = _run_mark(psutil.Process(live_run.pid))
    ours = f"{os.getpid()}:{psutil.Process().create_time():.2f}"
    left, beside, mine, unmarked = _marked(gone), _marked(live), _marked(ours), _marked(None)
    # A pid reused by another program since: its start time differs, so the run is gone.
    reused = _marked(f"{live_run.pid}:1.00")
    try:
        stopped = stop_leftovers(ours)

        assert sorted(int(line.split()[0]) for line in stopped) == sorted([left.pid, reused.pid])
        # (psutil reaped them: Popen no longer knows how they ended, only that they did)
        wait_for(lambda: left.poll() is not None and reused.poll() is not None,
                 what="the leftovers stopped")  # fmt: skip
        for process in (beside, mine, unmarked, live_run):
            assert process.poll() is None
    finally:
        for process in (left, beside, mine, unmarked, reused, live_run):
            stop_process(process)
