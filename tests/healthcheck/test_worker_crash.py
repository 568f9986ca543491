"""A worker killed in the middle of a sweep writes nothing half-done and blocks no later sweep."""

from __future__ import annotations

import signal
import time

import pytest

from healthcheck.state import lock_timeout, sweep_count
from inventory.choices import NodeStatus
from inventory.models import Node
from testkit.simfleet import Mode
from testkit.waiting import wait_for

pytestmark = pytest.mark.slow

INTERVAL, TIMEOUT = 3.0, 2.0  # the hanging node keeps each sweep busy for 2 s


def test_a_sweep_killed_midway_leaves_no_trace_and_the_next_one_runs(
    master_procs, sweep_redis, fleet, make_node
):
    runner = fleet(2)
    runner.set_node_mode(1, Mode.HANG)
    nodes = [make_node(ip=node.ip) for node in runner.nodes]
    procs = master_procs(beats=1, interval=INTERVAL, timeout=TIMEOUT)
    worker = procs.children[0]

    def sweep_started() -> bool:
        return (
            "probe_fleet" in worker.log_path.read_text()
            and runner.nodes[1].ports["sys-exporter"].requests > 0
        )

    try:
        wait_for(sweep_started, timeout=40, interval=0.02)
    except AssertionError:
        pytest.fail("no sweep started:\n" + procs.logs())
    procs.stop(worker, signal.SIGKILL)  # mid-probe: the hanging node holds it for 2 s
    killed = time.monotonic()

    assert sweep_count(sweep_redis) == 0
    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UNKNOWN}

    master_procs.start_worker(name="worker-2")
    try:
        wait_for(lambda: sweep_count(sweep_redis) >= 1, timeout=30, interval=0.1)
    except AssertionError:
        pytest.fail("no sweep after the crash:\n" + procs.logs())
    recovered = time.monotonic() - killed
    # The dead sweep's lock expires before the next tick, so at worst we wait
    # for that tick, a worker start-up and one sweep.
    assert lock_timeout(INTERVAL) < INTERVAL
    assert recovered < INTERVAL + TIMEOUT + 15, recovered
    statuses = dict(Node.objects.values_list("pk", "status"))
    assert statuses == {nodes[0].pk: NodeStatus.ONLINE, nodes[1].pk: NodeStatus.OFFLINE}
