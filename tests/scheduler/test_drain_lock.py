"""The drain pass's lock (scheduler.tasks, redis-py's Lock on the master's Redis): renewed
before each command the pass sends to Slurm, and a pass that lost it stops acting."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

from contract.drainpolicy import DrainBudget, DrainMode
from contract.verdicts import HealthAction, HealthState
from scheduler import tasks
from scheduler.drain import Decision, MacNode, Plan, Policy, Step
from scheduler.drainpass import PassResult, act

ON = Policy(DrainMode.ON, DrainBudget(count=5))


@pytest.fixture
def server() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    cache.delete(tasks.LOCK_KEY)
    try:
        yield client
    finally:
        cache.delete(tasks.LOCK_KEY)
        client.close()


def sick(index: int) -> MacNode:
    return MacNode(
        id=index, hostname=f"gpu-{index:02d}", slurm_name=f"gpu-{index:02d}",
        state=HealthState.UNHEALTHY, action=HealthAction.REBOOT, evidence="XID 79; reboot",
        streak=1, since=float(index),
    )  # fmt: skip


def test_a_pass_that_lost_its_lock_stops_acting():
    class Slurm:
        drained: list = []

        def drain(self, name: str, reason: str) -> None:
            self.drained.append(name)

    held = iter([True, False])  # the lock expires between the first drain and the second
    steps = [Step(sick(i), Decision.DRAIN, f"MAC: XID 79 {i}", "") for i in (1, 2, 3)]
    plan_ = Plan(steps=list(steps), limit=5, drained=3)
    result = PassResult(plan=plan_)

    outcome = act(plan_, Slurm(), ON, result, {}, lambda: next(held))

    assert Slurm.drained == ["gpu-01"] and outcome == steps[:1] == result.done
    assert result.lost_lock and "lock was lost to another pass" in result.error
    assert plan_.drained == 1  # what this pass left drained, for the budget's figures


def test_the_pass_renews_its_lock_and_learns_when_another_pass_took_it(server, monkeypatch):
    key = cache.make_key(tasks.LOCK_KEY)
    said: list[bool] = []

    def a_long_pass(still_held):
        server.pexpire(key, 500)  # most of the lock's time gone on slow commands
        said.append(still_held())
        assert server.pttl(key) > (tasks.LOCK_SECONDS - 5) * 1000  # renewed in full
        server.delete(key)  # a stall past the lock's time: it expired...
        assert server.lock(key, timeout=60).acquire(blocking=False)  # ...the next pass took it
        said.append(still_held())
        return PassResult(skipped="stopped")

    monkeypatch.setattr(tasks, "run_drain_pass", a_long_pass)
    assert tasks.drain_nodes() == {"ran": False, "reason": "stopped", "error": ""}
    assert said == [True, False]
    assert server.exists(key)  # the next pass's lock, left to it


def test_a_second_pass_does_not_start_while_the_lock_is_held(server, monkeypatch):
    monkeypatch.setattr(tasks, "run_drain_pass", lambda still_held: pytest.fail("ran"))
    other = server.lock(cache.make_key(tasks.LOCK_KEY), timeout=60)
    assert other.acquire(blocking=False)
    assert tasks.drain_nodes() == {"ran": False, "reason": "another pass is running"}
    assert other.owned()
