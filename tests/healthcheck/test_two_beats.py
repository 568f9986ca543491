"""Two beat processes by mistake, one real worker: still exactly one sweep per interval."""

from __future__ import annotations

import itertools
import time

import pytest

from healthcheck.state import sweep_history
from testkit.waiting import wait_for

pytestmark = pytest.mark.slow

WINDOW = 6.0  # seconds observed, i.e. six 1-second intervals


def test_two_beats_give_one_sweep_per_interval(master_procs, sweep_redis, fleet, make_node):
    runner = fleet(2)
    for node in runner.nodes:
        make_node(ip=node.ip)
    procs = master_procs(beats=2)

    try:
        wait_for(lambda: sweep_history(sweep_redis), timeout=40, interval=0.2)
    except AssertionError:
        pytest.fail("no sweep ran:\n" + procs.logs())
    start = time.time()
    time.sleep(WINDOW)
    end = time.time()

    started = sorted(
        entry["started_at"]
        for entry in sweep_history(sweep_redis)
        if start <= entry["started_at"] < end
    )
    gaps = [b - a for a, b in itertools.pairwise(started)]
    logs = procs.logs()
    # Both beats really sent sweeps; the second one's were refused by the slot.
    for index in range(2):
        beat_log = (procs.log_dir / f"beat-{index}.log").read_text()
        assert beat_log.count("Sending due task probe-fleet") >= 3, logs
    assert "a sweep already ran in this interval" in logs
    # At most one per interval (the point); at least half of them even on a loaded machine.
    assert WINDOW / 2 <= len(started) <= WINDOW + 1, (started, logs)
    assert min(gaps) >= 0.75, gaps
