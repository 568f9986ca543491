"""Sweeps never overlap and run once per interval: the Redis lock and slot behind probe_fleet.

A sweep slower than the lock's TTL keeps it (a heartbeat), and one that lost it writes
nothing (the fence before the inventory write).
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from healthcheck import tasks
from healthcheck.state import RUNNING_KEY, SweepLock, lock_ttl_ms, sweep_count, take_slot
from inventory.choices import EventKind, NodeStatus
from inventory.models import Node, NodeEvent
from testkit.simfleet import Mode
from tests.healthcheck.conftest import wait_for

pytestmark = pytest.mark.django_db


def test_an_overlapping_sweep_is_refused(sweep_redis, fast_probes, sd_dir):
    holder = SweepLock(sweep_redis, 5000)
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


def test_the_lock_is_released_only_by_its_token(sweep_redis):
    mine = SweepLock(sweep_redis, 5000)
    other = SweepLock(sweep_redis, 5000)
    assert mine.acquire()
    assert not other.acquire()
    assert other.release() is False  # never held it
    other.held = True  # even pretending does not help: the token differs
    assert other.release() is False
    assert sweep_redis.get(RUNNING_KEY) == mine.token.encode()
    assert mine.release() is True
    assert sweep_redis.get(RUNNING_KEY) is None


def test_a_dead_holder_frees_the_lock_before_the_next_interval(sweep_redis):
    interval = 0.5
    assert lock_ttl_ms(interval) < interval * 1000
    crashed = SweepLock(sweep_redis, lock_ttl_ms(interval))
    assert crashed.acquire()  # and never releases: its worker died
    time.sleep(interval)
    assert SweepLock(sweep_redis, lock_ttl_ms(interval)).acquire()


def test_extend_keeps_a_long_sweep_locked(sweep_redis):
    lock = SweepLock(sweep_redis, 300)
    assert lock.acquire()
    for _ in range(4):
        time.sleep(0.15)
        assert lock.extend()
    assert not SweepLock(sweep_redis, 300).acquire()
    lock.release()


def test_the_slot_is_taken_once_per_interval(sweep_redis):
    assert take_slot(sweep_redis, 0.5)
    assert not take_slot(sweep_redis, 0.5)
    time.sleep(0.45)
    assert take_slot(sweep_redis, 0.5)


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
        # Well past the TTL: today's lock would have expired and let these run.
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


# The sweep runs in a thread of its own: it must see the committed nodes.
@pytest.mark.django_db(transaction=True)
def test_a_sweep_that_lost_its_lock_writes_nothing(sweep_redis, settings, sd_dir, fleet, make_node):
    settings.PROBE_INTERVAL, settings.PROBE_TIMEOUT = 1.0, 1.5
    runner = fleet(2)
    runner.set_node_mode(1, Mode.HANG)
    for node in runner.nodes:
        make_node(ip=node.ip)
    results = []
    slow = threading.Thread(target=_sweep_into, args=(results,))
    slow.start()
    wait_for(lambda: sweep_redis.get(RUNNING_KEY), timeout=5, interval=0.01)
    # As after a Redis restart: the lock is gone and another sweep holds a new one.
    sweep_redis.set(RUNNING_KEY, "another-sweep", px=10_000)
    slow.join()
    assert results == [{"ran": False, "reason": "lock lost"}]
    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UNKNOWN}
    assert not NodeEvent.objects.exists()
    assert sweep_redis.get(RUNNING_KEY) == b"another-sweep"  # never released by us
