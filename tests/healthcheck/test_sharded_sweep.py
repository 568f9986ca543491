"""A sweep split into chunks gives what one sweep gives, in any order, retried or raced.

The chunk and finishing steps run here, in the test process, over a real simulated
fleet, PostgreSQL and Redis; test_sharded_workers.py runs them in real Celery workers.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from healthcheck import chunks
from healthcheck.state import RUNNING_KEY, SweepLock, last_sweep, lock_ttl_ms, sweep_count
from healthcheck.sweep import judge, load_nodes, probe_nodes, run_sweep, save_changes
from inventory.choices import NodeStatus
from inventory.live import join_dashboard, leave_dashboard
from inventory.models import Node, NodeEvent
from testkit.simfleet import Mode

pytestmark = pytest.mark.django_db

STATUS_FIELDS = ("hostname", "status", "status_reason", "status_detail", "diagnosis",
                 "exporter_health")  # fmt: skip


@pytest.fixture
def seven_nodes(fleet, make_node, fast_probes, sd_dir, sweep_redis):
    """answer, refuse, hang, answer, black-hole, forwarding-off, answer."""
    runner = fleet(7)
    runner.set_node_mode(1, Mode.REFUSE)
    runner.set_node_mode(2, Mode.HANG)
    runner.set_node_mode(4, Mode.BLACKHOLE)
    runner.set_mode(5, "sys-exporter", Mode.BLACKHOLE)
    nodes = [make_node(ip=node.ip) for node in runner.nodes]
    return runner, nodes


def begin_sweep(client, size: int) -> tuple[SweepLock, list[tuple[int, int]]]:
    """What probe_fleet does before it sends the chunks: the lock, the plan, the record."""
    lock = SweepLock(client, lock_ttl_ms(1.0))
    assert lock.acquire()
    ranges = chunks.plan_fleet(size)
    chunks.begin(client, lock.token, len(ranges), time.time())
    return lock, ranges


def sharded_sweep(client, size: int, order=None, sd_dir: Path | None = None):
    lock, ranges = begin_sweep(client, size)
    indexes = list(range(len(ranges))) if order is None else order(list(range(len(ranges))))
    completes = [chunks.run_chunk(lock.token, i, ranges[i]).complete for i in indexes]
    assert completes == [False] * (len(ranges) - 1) + [True]
    return chunks.finish(lock.token, sd_dir=sd_dir), ranges


def snapshot(sd_dir: Path) -> dict:
    """Statuses, events and targets files, without ids or times."""
    return {
        "statuses": list(Node.objects.order_by("id").values_list(*STATUS_FIELDS)),
        "events": sorted(
            (e.hostname, e.kind, e.message, json.dumps(e.data, sort_keys=True))
            for e in NodeEvent.objects.all()
        ),
        "targets": {path.name: path.read_text() for path in sorted(sd_dir.glob("*.json"))},
    }


def reset_inventory() -> None:
    NodeEvent.objects.all().delete()
    Node.objects.update(
        status=NodeStatus.UNKNOWN, status_reason="", status_detail="", diagnosis="",
        exporter_health={}, last_seen=None,
    )  # fmt: skip


def test_it_splits_node_ids_into_ranges_of_the_chunk_size():
    assert chunks.plan([9, 3, 4, 12, 20, 7, 8], 3) == [(3, 7), (8, 12), (20, 20)]
    assert chunks.plan([5, 6], 10) == [(5, 6)]
    assert chunks.plan([], 10) == []
    with pytest.raises(ValueError, match="MAC_SWEEP_CHUNK_SIZE"):
        chunks.plan([1], 0)


@pytest.mark.parametrize("order", [None, lambda xs: xs[::-1], lambda xs: xs[1::2] + xs[::2]])
def test_chunks_in_any_order_give_the_statuses_events_and_targets_of_one_sweep(
    seven_nodes, sweep_redis, tmp_path, order
):
    run_sweep(sd_dir=tmp_path / "one")
    expected = snapshot(tmp_path / "one")
    reset_inventory()

    stats, ranges = sharded_sweep(sweep_redis, 2, order, sd_dir=tmp_path / "sharded")

    assert len(ranges) == 4
    assert snapshot(tmp_path / "sharded") == expected
    assert (stats.nodes, stats.chunks, stats.changed) == (7, 4, 7)
    assert (stats.online, stats.offline, stats.went_offline) == (3, 4, 4)
    assert last_sweep(sweep_redis)["chunks"] == 4
    assert sweep_redis.get(RUNNING_KEY) is None  # the finishing step released the lock


def test_a_chunk_run_twice_adds_no_second_event(seven_nodes, sweep_redis, sd_dir):
    lock, ranges = begin_sweep(sweep_redis, 3)
    first = chunks.run_chunk(lock.token, 0, ranges[0])
    events = NodeEvent.objects.count()
    # Its worker died after the commit, so the broker hands the message out again.
    again = chunks.run_chunk(lock.token, 0, ranges[0])

    assert (first.ran, first.changed) == (True, 3)
    assert (again.ran, again.changed, again.complete) == (True, 0, False)
    assert NodeEvent.objects.count() == events == 3
    for index in range(1, len(ranges)):
        chunks.run_chunk(lock.token, index, ranges[index])
    stats = chunks.finish(lock.token)
    assert stats.changed == 7  # the first attempt's figures, not the retry's
    assert NodeEvent.objects.count() == 7


def test_two_attempts_judged_from_the_same_rows_write_each_change_once(seven_nodes):
    # Two copies of one chunk at once: both loaded and probed before either saved.
    rows = load_nodes()
    probes = probe_nodes(rows)
    now = timezone.now()
    first, second = judge(rows, probes, now), judge(rows, probes, now)
    assert len(second.events) == 7

    save_changes(first, now)
    save_changes(second, now)

    assert len(first.events) == 7
    assert second.events == [] and not any(row["status_changed"] for row in second.changed)
    assert NodeEvent.objects.count() == 7


def test_a_chunk_of_a_sweep_given_up_writes_nothing(seven_nodes, sweep_redis):
    lock, ranges = begin_sweep(sweep_redis, 3)
    # Its lock expired (the sweep was given up) and a newer sweep holds a new one.
    sweep_redis.set(RUNNING_KEY, "a-newer-sweep", px=10_000)

    result = chunks.run_chunk(lock.token, 0, ranges[0])

    assert (result.ran, result.reason) == (False, "sweep over")
    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UNKNOWN}
    assert not NodeEvent.objects.exists()
    assert chunks.run_chunk("no-such-sweep", 0, ranges[0]).reason == "sweep over"


def receive_all(layer, channel) -> list[dict]:
    async def drain() -> list[dict]:
        import asyncio

        messages = []
        while True:
            try:
                async with asyncio.timeout(0.5):
                    messages.append(await layer.receive(channel))
            except TimeoutError:
                return messages

    return async_to_sync(drain)()


def test_a_sharded_sweep_pushes_once_and_finishes_once(seven_nodes, sweep_redis):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(join_dashboard)(layer, channel)
    try:
        lock, ranges = begin_sweep(sweep_redis, 2)
        for index, id_range in enumerate(ranges):
            chunks.run_chunk(lock.token, index, id_range)
        assert chunks.finish(lock.token) is not None
        assert chunks.finish(lock.token) is None  # a duplicate finishing task does nothing
        messages = receive_all(layer, channel)
    finally:
        async_to_sync(leave_dashboard)(layer, channel)
    assert [m["type"] for m in messages] == ["nodes.changed"]
    assert len(messages[0]["changes"]) == 7
    assert sweep_count(sweep_redis) == 1
    assert not sweep_redis.smembers(chunks.PENDING_KEY)


def test_changes_of_a_sweep_that_never_finished_are_pushed_by_the_next(seven_nodes, sweep_redis):
    abandoned, ranges = begin_sweep(sweep_redis, 3)
    chunks.run_chunk(abandoned.token, 0, ranges[0])  # then its other chunks were lost
    sweep_redis.delete(RUNNING_KEY)  # and its lock expired
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(join_dashboard)(layer, channel)
    try:
        stats, _ranges = sharded_sweep(sweep_redis, 3)
        messages = receive_all(layer, channel)
    finally:
        async_to_sync(leave_dashboard)(layer, channel)
    assert stats.changed == 4  # the first chunk's nodes were already saved
    pushed = {change["id"] for message in messages for change in message["changes"]}
    assert pushed == set(Node.objects.values_list("id", flat=True))
    assert len(messages) == 1
    assert NodeEvent.objects.count() == 7
