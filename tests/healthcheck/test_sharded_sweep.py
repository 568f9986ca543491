"""A sweep split into chunks gives what one sweep gives, in any order, retried or raced.

The chunk and callback steps run here, in the test process, over a real simulated
fleet, PostgreSQL and Redis (the callback gets the chunks' results as the chord would
give them); test_sharded_workers.py runs them in real Celery workers, chord and all.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from asgiref.sync import async_to_sync
from celery.exceptions import ChordError
from channels.layers import get_channel_layer
from django.utils import timezone

from healthcheck import chunks
from healthcheck.fence import claim_fence
from healthcheck.state import (
    PENDING_KEY,
    RUNNING_KEY,
    last_sweep,
    lock_token,
    sweep_count,
    sweep_lock,
)
from healthcheck.sweep import judge, load_nodes, probe_nodes, run_sweep, save_changes
from healthcheck.tasks import probe_fleet, sweep_chord
from inventory.choices import NodeStatus
from inventory.live import join_dashboard, leave_dashboard
from inventory.models import Node, NodeEvent
from macweb.celery import app as celery_app
from testkit.channel_layer import receive_within
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


class Sweep:
    """What probe_fleet hands its chord: the lock's token, the fence, the start, the plan."""

    def __init__(self, client, size: int) -> None:
        self.lock = sweep_lock(client)
        assert self.lock.acquire()
        self.token, self.fence = lock_token(self.lock), claim_fence()
        self.started_at = time.time()
        self.ranges = chunks.plan_fleet(size)

    def chunk(self, index: int) -> dict:
        return chunks.run_chunk(self.token, self.fence, self.started_at, self.ranges[index])

    def finish(self, results: list[dict], sd_dir: Path | None = None):
        return chunks.finish(self.token, self.fence, self.started_at, results, sd_dir=sd_dir)


def sharded_sweep(client, size: int, order=None, sd_dir: Path | None = None):
    sweep = Sweep(client, size)
    indexes = list(range(len(sweep.ranges)))
    results = [sweep.chunk(i) for i in (indexes if order is None else order(indexes))]
    assert all(result["ran"] for result in results)
    return sweep.finish(results, sd_dir=sd_dir), sweep.ranges


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
    assert sweep_redis.get(RUNNING_KEY) is None  # the callback released the lock


def test_a_chunk_run_twice_adds_no_second_event(seven_nodes, sweep_redis, sd_dir):
    sweep = Sweep(sweep_redis, 3)
    first = sweep.chunk(0)
    events = NodeEvent.objects.count()
    # Its worker died after the commit, so the broker hands the message out again.
    again = sweep.chunk(0)

    assert first["ran"] and first["stats"]["changed"] == 3
    assert again["ran"] and again["stats"]["changed"] == 0
    assert NodeEvent.objects.count() == events == 3
    rest = [sweep.chunk(index) for index in range(1, len(sweep.ranges))]
    # The chord counts a task once, with the result it first recorded.
    stats = sweep.finish([first, *rest])
    assert stats.changed == 7
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
    sweep = Sweep(sweep_redis, 3)
    # Its lock expired (the sweep was given up) and a newer sweep holds a new one.
    sweep_redis.delete(RUNNING_KEY)
    newer = sweep_lock(sweep_redis)
    assert newer.acquire()

    result = sweep.chunk(0)

    assert result == {"ran": False, "reason": "sweep over"}
    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UNKNOWN}
    assert not NodeEvent.objects.exists()
    assert sweep.finish([result]) is None  # nor does its callback publish anything
    assert sweep_count(sweep_redis) == 0


def test_a_chunk_whose_sweep_was_superseded_writes_nothing(seven_nodes, sweep_redis):
    sweep = Sweep(sweep_redis, 3)
    claim_fence()  # a newer sweep took the fence, though this one's lock still looks held

    result = sweep.chunk(0)

    assert result["ran"] is False and result["reason"] == "lock lost"
    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UNKNOWN}
    assert not NodeEvent.objects.exists()
    assert not sweep_redis.smembers(PENDING_KEY)


def receive_all(layer, channel) -> list[dict]:
    async def drain() -> list[dict]:
        messages = []
        while True:
            try:
                messages.append(await receive_within(layer, channel, 0.5))
            except TimeoutError:
                return messages

    return async_to_sync(drain)()


def test_a_sharded_sweep_pushes_once_and_finishes_once(seven_nodes, sweep_redis):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(join_dashboard)(layer, channel)
    try:
        sweep = Sweep(sweep_redis, 2)
        results = [sweep.chunk(index) for index in range(len(sweep.ranges))]
        assert sweep.finish(results) is not None
        assert sweep.finish(results) is None  # a redelivered callback does nothing
        messages = receive_all(layer, channel)
    finally:
        async_to_sync(leave_dashboard)(layer, channel)
    assert [m["type"] for m in messages] == ["nodes.changed"]
    assert len(messages[0]["changes"]) == 7
    assert sweep_count(sweep_redis) == 1
    assert not sweep_redis.smembers(PENDING_KEY)
    assert sweep_redis.get(RUNNING_KEY) is None


def test_changes_of_a_sweep_that_never_finished_are_pushed_by_the_next(seven_nodes, sweep_redis):
    abandoned = Sweep(sweep_redis, 3)
    abandoned.chunk(0)  # then its other chunks were lost
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


def test_changes_of_a_one_process_sweep_that_died_before_its_push_are_pushed_next(
    seven_nodes, sweep_redis, monkeypatch
):
    from healthcheck import sweep

    def die() -> None:
        raise SystemExit("worker killed between the commit and the push")

    monkeypatch.setattr(sweep, "write_targets_step", lambda *args: die())
    with pytest.raises(SystemExit):
        run_sweep()
    monkeypatch.undo()
    assert len(sweep_redis.smembers(PENDING_KEY)) == 7
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(join_dashboard)(layer, channel)
    try:
        stats = run_sweep()
        messages = receive_all(layer, channel)
    finally:
        async_to_sync(leave_dashboard)(layer, channel)
    assert stats.changed == 0
    assert {change["id"] for change in messages[0]["changes"]} == {
        node.pk for node in seven_nodes[1]
    }


class FlakyRedis:
    """Redis dropping the connection at the chunk's pending-set write."""

    def sadd(self, *args):
        raise redis.ConnectionError("Connection reset by peer")


def test_a_chunk_that_raises_is_counted_and_the_sweep_still_publishes(
    seven_nodes, sweep_redis, sd_dir, monkeypatch, client
):
    from healthcheck import sweep as sweep_module

    sweep = Sweep(sweep_redis, 3)
    with monkeypatch.context() as patch:
        patch.setattr(sweep_module, "get_redis", lambda *args, **kwargs: FlakyRedis())
        failed = sweep.chunk(0)  # a task that raised would never let the chord call finish
    rest = [sweep.chunk(index) for index in range(1, len(sweep.ranges))]

    stats = sweep.finish([failed, *rest])

    low, high = sweep.ranges[0]
    assert failed["ran"] is False and failed["reason"] == "error"
    assert "ConnectionError" in failed["error"] and f"nodes {low}..{high}" in failed["error"]
    assert (stats.chunks, stats.chunks_failed, stats.changed) == (2, 1, 4)
    # Its write rolled back: its nodes wait for the next sweep, untouched.
    untouched = Node.objects.filter(id__gte=low, id__lte=high)
    assert set(untouched.values_list("status", flat=True)) == {NodeStatus.UNKNOWN}
    assert not NodeEvent.objects.filter(node_id__gte=low, node_id__lte=high).exists()
    # The others' work is published and the lock released for the next tick.
    assert json.loads((sd_dir / "sys-exporter.json").read_text())
    assert sweep_redis.get(RUNNING_KEY) is None
    assert last_sweep(sweep_redis)["chunks_failed"] == 1
    sweeps = client.get("/health").json()["checks"]["sweeps"]
    assert sweeps["ok"] and "1 of its chunks failed" in sweeps["detail"], sweeps
    assert probe_fleet.apply(kwargs={"force": True}).get()["ran"]
    assert set(untouched.values_list("status", flat=True)) != {NodeStatus.UNKNOWN}


def fail_chord(built, reason: str) -> None:
    """What Celery's result backend does once a chord's header task failed (a time limit,
    an expiry): instead of the callback, the callback's error callbacks, from its except."""
    try:
        raise ChordError(reason)
    except ChordError as exc:
        celery_app.backend.chord_error_from_stack(built.body, exc)


def test_a_chunk_that_celery_fails_releases_the_lock_through_the_chords_error_callback(
    seven_nodes, sweep_redis
):
    sweep = Sweep(sweep_redis, 3)
    built = sweep_chord(sweep.token, sweep.fence, sweep.started_at, sweep.ranges)
    fail_chord(built, "Dependency 1 raised TimeLimitExceeded(300)")

    assert sweep_redis.get(RUNNING_KEY) is None
    assert probe_fleet.apply(kwargs={"force": True}).get()["ran"]


def test_the_chords_error_callback_never_releases_another_sweeps_lock(sweep_redis):
    newer = sweep_lock(sweep_redis)
    assert newer.acquire()
    stale = sweep_chord("not-the-holders-token", 1, time.time(), [(1, 2), (3, 4)])

    fail_chord(stale, "Dependency 1 raised TaskRevokedError('expired')")

    assert newer.owned()
