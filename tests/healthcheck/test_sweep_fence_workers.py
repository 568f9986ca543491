"""A sweep that loses its lock between its chunks' probes and their write commits nothing.

Real Celery workers run the chunks of a real probe_fleet message over a real fleet,
PostgreSQL and Redis. While every chunk waits on a hanging node (its probes started,
its write not yet), the test takes the lock away: the key deleted, as after a Redis
restart, or deleted and taken by a newer sweep with a newer fencing token. No Node row
changes, no event is written, nothing is left to push, and the chord's callback
publishes nothing.
"""

from __future__ import annotations

import pytest

from healthcheck.fence import claim_fence
from healthcheck.state import PENDING_KEY, RUNNING_KEY, sweep_count
from inventory.choices import NodeStatus
from inventory.models import Node, NodeEvent
from testkit.simfleet import Mode
from testkit.waiting import wait_for

pytestmark = pytest.mark.slow

INTERVAL, TIMEOUT = 30.0, 2.0  # one sweep in the test; each chunk hangs 2 s on a node


@pytest.mark.parametrize("taken", [False, True], ids=["lock-deleted", "lock-taken"])
def test_chunks_that_lost_the_sweep_lock_mid_probe_commit_nothing(
    master_procs, sweep_redis, fleet, make_node, taken
):
    runner = fleet(4)
    for index in (1, 3):  # one hanging node in each chunk of two
        runner.set_node_mode(index, Mode.HANG)
    nodes = [make_node(ip=node.ip) for node in runner.nodes]
    hanging = [runner.nodes[index].ports["sys-exporter"] for index in (1, 3)]
    procs = master_procs(
        beats=0, worker=False, interval=INTERVAL, timeout=TIMEOUT, MAC_SWEEP_CHUNK_SIZE="2"
    )
    workers = [master_procs.start_worker(name=f"w{i}") for i in (1, 2)]
    from healthcheck.tasks import probe_fleet

    probe_fleet.apply_async(kwargs={"force": True})  # what beat sends, as a real message
    try:
        wait_for(lambda: all(port.requests for port in hanging), timeout=60, interval=0.01)
    except AssertionError:
        pytest.fail("the chunks never probed their hanging nodes:\n" + procs.logs())

    # Both chunks have probed and wait on their hanging node; neither has written.
    sweep_redis.delete(RUNNING_KEY)
    if taken:
        sweep_redis.set(RUNNING_KEY, "a-newer-sweep", px=60_000)
        claim_fence()

    def chunks_done() -> bool:
        logs = "".join(worker.log_path.read_text(errors="replace") for worker in workers)
        return logs.count("healthcheck.tasks.probe_chunk[") >= 4  # received, then ended

    try:
        wait_for(chunks_done, timeout=30, interval=0.1)
        # The chord still completes (each chunk returned), and its callback ends at once.
        wait_for(lambda: procs.logs().count("healthcheck.tasks.finish_sweep[") >= 2, timeout=15)
    except AssertionError:
        pytest.fail("the chunks never ended:\n" + procs.logs())
    logs = procs.logs()
    assert logs.count("abandoned, nothing written") == 2, logs
    rows = Node.objects.order_by("id").values_list("status", "last_seen", "exporter_health")
    assert list(rows) == [(NodeStatus.UNKNOWN, None, {})] * len(nodes)
    assert not NodeEvent.objects.exists()
    assert not sweep_redis.smembers(PENDING_KEY)
    assert sweep_count(sweep_redis) == 0  # the callback found the sweep given up
