"""Sweeps never overlap and run once per interval: redis-py's Lock, the slot, the fence.

A sweep slower than the lock's TTL keeps it (a heartbeat), and one that lost it commits
nothing: the fencing token is checked inside the write's own transaction.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections, transaction
from django.utils import timezone

from healthcheck import tasks
from healthcheck.fence import Fence, claim_fence, current_fence
from healthcheck.state import (
    PENDING_KEY,
    PREFIX,
    RUNNING_KEY,
    SweepLockLost,
    last_sweep,
    lock_timeout,
    lock_token,
    release_quietly,
    sweep_count,
    sweep_lock,
    take_slot,
)
from healthcheck.sweep import judge, load_nodes, probe_nodes, run_sweep, save_fenced
from inventory.choices import EventKind, NodeStatus
from inventory.models import Node, NodeEvent
from testkit.simfleet import Mode
from testkit.waiting import wait_for

pytestmark = pytest.mark.django_db


def test_an_overlapping_sweep_is_refused(sweep_redis, fast_probes, sd_dir):
    holder = sweep_lock(sweep_redis)
    assert holder.acquire()
    try:
        assert tasks.probe_fleet() == {"ran": False, "reason": "running"}
        assert tasks.probe_fleet(force=True) == {"ran": False, "reason": "running"}
    finally:
        holder.release()
    assert sweep_count(sweep_redis) == 0


def test_two_sweeps_started_together_run_once(sweep_redis, fast_probes, sd_dir, fleet, make_node):
    runner = fleet(2)
    for node in runner.nodes:
        make_node(ip=node.ip)
    results = []

    def sweep():
        results.append(tasks.probe_fleet())

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(r["ran"] for r in results) == [False, True]
    assert sweep_count(sweep_redis) == 1


def test_a_second_sweep_in_the_same_interval_is_skipped(sweep_redis, fast_probes, sd_dir):
    assert tasks.probe_fleet()["ran"] is True
    assert tasks.probe_fleet() == {"ran": False, "reason": "interval"}
    time.sleep(fast_probes.PROBE_INTERVAL)
    assert tasks.probe_fleet()["ran"] is True
    assert sweep_count(sweep_redis) == 2


def test_the_lock_is_released_only_by_its_token(sweep_redis, fast_probes):
    mine = sweep_lock(sweep_redis)
    assert mine.acquire()
    other = sweep_lock(sweep_redis)
    assert not other.acquire()
    assert release_quietly(other) is False  # never held it
    pretender = sweep_lock(sweep_redis, token="not-the-holder")
    assert not pretender.owned()
    assert release_quietly(pretender) is False  # a token of its own does not help
    assert sweep_redis.get(RUNNING_KEY) == lock_token(mine).encode()
    # Another process (a chunk task) resumes the lock by its token, and may release it.
    resumed = sweep_lock(sweep_redis, token=lock_token(mine))
    assert resumed.owned()
    assert release_quietly(resumed) is True
    assert sweep_redis.get(RUNNING_KEY) is None


def test_a_dead_holder_frees_the_lock_before_the_next_interval(sweep_redis, settings):
    settings.PROBE_INTERVAL = 0.5
    assert lock_timeout(0.5) < 0.5
    crashed = sweep_lock(sweep_redis)
    assert crashed.acquire()  # and never releases: its worker died
    time.sleep(0.5)
    assert sweep_lock(sweep_redis).acquire()


def test_the_slot_is_taken_once_per_interval(sweep_redis):
    assert take_slot(sweep_redis, 0.5)
    assert not take_slot(sweep_redis, 0.5)
    time.sleep(0.45)
    assert take_slot(sweep_redis, 0.5)


def test_fencing_tokens_only_grow(transactional_db):
    first = claim_fence()
    second = claim_fence()
    assert second == first + 1 == current_fence()


def _sweep_into(results: list) -> None:
    try:
        results.append(tasks.probe_fleet())
    finally:
        connections.close_all()  # the thread's own connection, so teardown can drop the db


# The sweep runs in a thread of its own: it must see the committed nodes.
@pytest.mark.django_db(transaction=True)
def test_it_keeps_a_sweep_slower_than_the_lock_ttl_locked(
    sweep_redis, settings, sd_dir, fleet, make_node
):
    # The hanging node keeps the sweep busy for 2.5 s; the lock's TTL is 0.9 s.
    settings.PROBE_INTERVAL, settings.PROBE_TIMEOUT = 1.0, 2.5
    runner = fleet(2)
    runner.set_node_mode(1, Mode.HANG)
    for node in runner.nodes:
        make_node(ip=node.ip)
    results = []
    slow = threading.Thread(target=_sweep_into, args=(results,))
    slow.start()
    wait_for(lambda: sweep_redis.get(RUNNING_KEY), timeout=5, interval=0.01)
    overlaps = []
    while slow.is_alive():
        # Well past the TTL: without the heartbeat the lock would have expired.
        time.sleep(0.3)
        if slow.is_alive():
            overlaps.append(tasks.probe_fleet(force=True))
    slow.join()
    assert results[0]["ran"] is True
    assert len(overlaps) >= 5
    assert all(result == {"ran": False, "reason": "running"} for result in overlaps), overlaps
    assert sweep_count(sweep_redis) == 1
    assert NodeEvent.objects.filter(kind=EventKind.OFFLINE).count() == 1
    assert sweep_redis.get(RUNNING_KEY) is None  # released at the end


@pytest.mark.django_db(transaction=True)
def test_a_sweep_whose_lock_is_taken_by_another_writes_nothing(
    sweep_redis, settings, sd_dir, fleet, make_node
):
    settings.PROBE_INTERVAL, settings.PROBE_TIMEOUT = 1.0, 1.5
    runner = fleet(2)
    runner.set_node_mode(1, Mode.HANG)
    for node in runner.nodes:
        make_node(ip=node.ip)
    results = []
    slow = threading.Thread(target=_sweep_into, args=(results,))
    slow.start()
    wait_for(lambda: runner.nodes[1].ports["sys-exporter"].requests, timeout=5, interval=0.01)
    # Mid-probe, as after a Redis restart: the lock is gone and another sweep took it,
    # with a newer fencing token.
    sweep_redis.set(RUNNING_KEY, "another-sweep", px=10_000)
    claim_fence()
    slow.join()
    assert results == [{"ran": False, "reason": "lock lost"}]
    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UNKNOWN}
    assert not NodeEvent.objects.exists()
    assert sweep_redis.get(RUNNING_KEY) == b"another-sweep"  # never released by the loser


@pytest.mark.django_db(transaction=True)
def test_a_lock_lost_after_the_check_still_cannot_commit(sweep_redis, fast_probes, fleet):
    """The race the fence closes: the lock is lost between the last look at it and the
    commit. Here a newer sweep claims its token while the older one's transaction is
    open, between its writes and its fence check; the older one must roll back."""
    runner = fleet(3)
    for node in runner.nodes:
        Node.objects.create(hostname=f"n{node.ip}", ip=node.ip)
    lock = sweep_lock(sweep_redis)
    assert lock.acquire()
    fence = Fence.claim(lock)
    rows = load_nodes()
    probes = probe_nodes(rows)
    now = timezone.now()
    judgement = judge(rows, probes, now)
    assert len(judgement.events) == 3

    class TakenMidCommit(Fence):
        def check(self) -> None:
            # The lock expires and a newer sweep (another process) claims its token.
            lock.release()
            newer = threading.Thread(target=_claim_elsewhere)
            newer.start()
            newer.join()
            super().check()

    with pytest.raises(SweepLockLost):
        save_fenced(judgement, now, TakenMidCommit(fence.token, lock=None))

    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UNKNOWN}
    assert not NodeEvent.objects.exists()
    assert not sweep_redis.smembers(PENDING_KEY)


def _claim_elsewhere() -> None:
    try:
        claim_fence()
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_newer_claim_waits_for_an_older_write_that_already_passed_its_fence(
    sweep_redis, fast_probes, fleet
):
    """The other order: the older write passed its check first; the newer claim waits
    for its commit (the fence row is locked) and the older write stands, whole."""
    runner = fleet(2)
    for node in runner.nodes:
        Node.objects.create(hostname=f"n{node.ip}", ip=node.ip)
    fence = Fence.claim()
    rows = load_nodes()
    judgement = judge(rows, probe_nodes(rows), timezone.now())
    claimed: list[int] = []
    with transaction.atomic():
        from healthcheck.sweep import save_changes

        save_changes(judgement, timezone.now())
        fence.check()
        newer = threading.Thread(target=lambda: claimed.append(_claim_and_close()))
        newer.start()
        newer.join(0.5)
        assert newer.is_alive(), "the claim must wait for the open write's commit"
    newer.join(10)
    assert claimed == [fence.token + 1]
    assert NodeEvent.objects.count() == 2


def _claim_and_close() -> int:
    try:
        return claim_fence()
    finally:
        connections.close_all()


def test_a_sweep_run_outside_the_tasks_fences_off_older_ones(
    sweep_redis, fast_probes, sd_dir, fleet, make_node
):
    runner = fleet(1)
    make_node(ip=runner.nodes[0].ip)
    older = Fence.claim()
    run_sweep()  # claims a newer token
    assert current_fence() == older.token + 1
    with pytest.raises(SweepLockLost, match="newer sweep"), transaction.atomic():
        older.check()


def test_another_masters_sweep_records_in_the_same_redis_are_not_this_ones(
    sweep_redis, settings, fast_probes, sd_dir
):
    # A master that used this Redis before (or beside): its last sweep, its lock and its
    # slot, under its own installation's prefix, and under the one all masters once shared.
    for prefix in {"mac-another-installation:sweep:", "mac:sweep:"} - {PREFIX}:
        sweep_redis.set(prefix + "running", "its-sweep", px=60_000)
        sweep_redis.set(prefix + "slot", "1", px=60_000)
        sweep_redis.set(prefix + "last", '{"nodes": 9999}')
    assert RUNNING_KEY.startswith(settings.CACHES["default"]["KEY_PREFIX"] + ":sweep:")

    assert last_sweep(sweep_redis) is None
    assert tasks.probe_fleet()["ran"] is True  # neither its lock nor its slot held this one
    assert last_sweep(sweep_redis)["nodes"] != 9999
