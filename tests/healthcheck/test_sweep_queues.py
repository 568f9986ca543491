"""/health names a chunk queue that no worker consumes, instead of blaming worker and beat.

Real beat and worker processes: the worker consumes only Celery's default queue while
MAC_PROBE_QUEUE routes the chunks elsewhere (fault D4 of issue 19, as a master whose
worker was started with `-Q celery`). Every sweep is split into chunks that nobody
takes; /health (served by this process, from the same Redis) must say which queue.
"""

from __future__ import annotations

import os
import time

import pytest

from healthcheck.health import check_queues
from healthcheck.state import QUEUES_KEY, queue_depths, record_queue_depth
from testkit.waiting import wait_for

QUEUE = f"mac-orphan-{os.getpid()}"


@pytest.fixture
def orphan_queue(sweep_redis):
    def clear() -> None:
        sweep_redis.delete(QUEUE, f"_kombu.binding.{QUEUE}", QUEUES_KEY)

    clear()
    yield QUEUE
    clear()


def test_a_backlog_that_never_shrinks_for_two_intervals_has_no_consumer(
    sweep_redis, orphan_queue, fast_probes
):
    now = time.time()
    for ago, depth in ((2.5, 0), (1.5, 3), (0.5, 6)):  # one sample a sweep, 1 s apart
        record_queue_depth(sweep_redis, orphan_queue, depth, now - ago)
    ok, detail = check_queues(queue_depths(sweep_redis))
    assert not ok and f"queue '{orphan_queue}': 6 chunk tasks waiting" in detail


def test_a_backlog_that_shrinks_or_empties_is_consumed(sweep_redis, orphan_queue, fast_probes):
    now = time.time()
    for ago, depth in ((3.5, 4), (2.5, 8), (1.5, 5), (0.5, 9)):  # taken between samples
        record_queue_depth(sweep_redis, orphan_queue, depth, now - ago)
    assert check_queues(queue_depths(sweep_redis)) == (True, f"chunk tasks waiting: {QUEUE}: 9")
    for ago, depth in ((2.5, 3), (1.5, 0), (0.5, 0)):
        record_queue_depth(sweep_redis, "other", depth, now - ago)
    assert check_queues(queue_depths(sweep_redis))[0]
    sweep_redis.hdel(QUEUES_KEY, "other")


def test_an_old_sample_blames_no_queue(sweep_redis, orphan_queue, fast_probes):
    """Sweeps stopped sampling (the worker is down): `sweeps` says so, not `queues`."""
    long_ago = time.time() - 60
    for ago, depth in ((3, 2), (2, 4), (1, 6)):
        record_queue_depth(sweep_redis, orphan_queue, depth, long_ago - ago)
    assert check_queues(queue_depths(sweep_redis))[0]


@pytest.mark.slow
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
