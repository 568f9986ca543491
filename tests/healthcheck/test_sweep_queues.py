"""/health names a chunk queue that no worker consumes, instead of blaming worker and beat.

Real beat and worker processes: the worker consumes only Celery's default queue while
MAC_PROBE_QUEUE routes the chunks elsewhere (fault D4 of issue 19, as a master whose
worker was started with `-Q celery`). Every sweep is split into chunks that nobody
takes; /health (served by this process, from the same Redis) must say which queue.
"""

from __future__ import annotations

import os

import pytest

from healthcheck.state import QUEUES_KEY, queue_depths
from tests.healthcheck.conftest import wait_for

pytestmark = pytest.mark.slow

QUEUE = f"mac-orphan-{os.getpid()}"


@pytest.fixture
def orphan_queue(sweep_redis):
    def clear() -> None:
        sweep_redis.delete(QUEUE, f"_kombu.binding.{QUEUE}", QUEUES_KEY)

    clear()
    yield QUEUE
    clear()


def test_health_names_a_chunk_queue_that_no_worker_consumes(
    master_procs, sweep_redis, orphan_queue, fleet, make_node, fast_probes, client
):
    runner = fleet(4)
    for node in runner.nodes:
        make_node(ip=node.ip)
    procs = master_procs(beats=1, worker=False, MAC_SWEEP_CHUNK_SIZE="2",
                         MAC_PROBE_QUEUE=orphan_queue)  # fmt: skip
    master_procs.start_worker(queues="celery")

    def unhealthy() -> dict | None:
        body = client.get("/health").json()
        return body if "queues" in body["failed"] else None

    try:
        body = wait_for(unhealthy, timeout=60, interval=0.5)
    except AssertionError:
        pytest.fail(f"/health never named the queue: {queue_depths(sweep_redis)}\n{procs.logs()}")

    detail = body["checks"]["queues"]["detail"]
    assert f"queue '{orphan_queue}'" in detail and "no worker consumes it" in detail
    assert f"celery -A macweb worker -Q {orphan_queue}" in detail
    assert queue_depths(sweep_redis)[orphan_queue]["depth"] >= 4  # two sweeps' chunks, at least
    assert sweep_redis.llen(orphan_queue) >= 4  # really there, never taken
    sweeps = body["checks"]["sweeps"]
    assert sweeps["ok"] or "mac-worker and mac-beat" not in sweeps["detail"], sweeps
    response = client.get("/health")
    assert response.status_code == 503
