"""/health's scheduler checks (scheduler.health): the drain budget names its nodes only to a
logged-in caller; /health answers anyone, and the deregister endpoint is built so that
strangers cannot list the inventory's names."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from contract.drainpolicy import DrainMode
from scheduler import drainpass, health, link
from scheduler.config import NODE_MAP_ERROR_KEY, NodeNameMap
from scheduler.health import check_budget
from tests.scheduler.conftest import clear_drain_keys

pytestmark = pytest.mark.django_db

SPENT = {
    "at": 0.0, "mode": "on", "budget": "10%", "fleet": 20, "limit": 2, "drained": 2,
    "held_back": ["gpu-secret-07", "gpu-secret-09"], "unmonitored": ["slurm-only-01"],
}  # fmt: skip


def test_a_stranger_gets_the_counts_and_a_logged_in_caller_the_names():
    ok, named = check_budget(SPENT)
    assert not ok
    assert named.endswith("would have drained: gpu-secret-07, gpu-secret-09")
    assert "never resumes: slurm-only-01 (resume by hand: scontrol update" in named
    ok, counted = check_budget(SPENT, named=False)
    assert not ok
    assert counted.startswith("drain budget spent: MAC keeps 2 of the 2 nodes")
    assert counted.endswith("would have drained: 2 node(s) (log in to see which)")
    assert "never resumes: 1 node(s) (log in to see which)" in counted
    assert "secret" not in counted and "slurm-only" not in counted


def test_health_names_held_back_nodes_to_logged_in_callers_only(
    client, settings, django_user_model
):
    settings.SLURM_DRAIN = DrainMode.ON
    clear_drain_keys()
    cache.set(drainpass.BUDGET_KEY, {**SPENT, "at": time.time()}, None)
    try:
        anonymous = client.get("/health")
        detail = anonymous.json()["checks"]["drain_budget"]["detail"]
        assert "would have drained: 2 node(s) (log in to see which)" in detail
        assert "gpu-secret" not in anonymous.content.decode()
        assert "slurm-only-01" not in anonymous.content.decode()

        client.force_login(django_user_model.objects.create_user("viewer"))
        named = client.get("/health").json()["checks"]["drain_budget"]["detail"]
        assert "would have drained: gpu-secret-07, gpu-secret-09" in named
    finally:
        clear_drain_keys()


# --- a drain that stopped: no pass completed for a few probe intervals -------------------


@pytest.fixture
def drain_on(settings):
    settings.SLURM_DRAIN = DrainMode.ON
    settings.PROBE_INTERVAL = 30.0
    settings.PROBE_TIMEOUT = 10.0
    clear_drain_keys()
    cache.delete(NODE_MAP_ERROR_KEY)
    yield
    clear_drain_keys()
    cache.delete(NODE_MAP_ERROR_KEY)


# Well after this process started: its grace is over.
LATER = health.PROCESS_STARTED + 100_000


def test_passes_that_stop_after_slurmctld_answered_degrade_slurm(drain_on):
    link.answered("slurmctld (primary) at ctl answers", now=LATER)
    cache.set(drainpass.BUDGET_KEY, {**SPENT, "held_back": [], "at": LATER + 5}, None)
    link.answered("slurmctld (primary) at ctl answers", now=LATER + 1000)  # the pass died next
    ok, detail = health.check_slurm(LATER + 60)
    assert ok and detail.startswith("slurmctld (primary) at ctl answers")

    ok, detail = health.check_slurm(LATER + 1005)

    assert not ok
    assert detail.startswith("drain passes stopped: the last completed 1000 s ago")
    assert "slurmctld last answered one 5 s ago" in detail
    assert detail.endswith("the worker's log says why: mac logs worker")
    assert health.scheduler_checks(LATER + 1005)["slurm"] == (False, detail)


def test_no_pass_completed_since_slurmctld_came_back_degrades_slurm(drain_on):
    link.failed("scontrol ping: timed out", now=LATER)
    link.answered("slurmctld (primary) at ctl answers", now=LATER + 100)  # back, then nothing
    assert health.check_slurm(LATER + 200)[0]

    ok, detail = health.check_slurm(LATER + 1000)

    assert not ok and detail.startswith("drain passes stopped: none completed")


def test_a_drain_that_never_ran_is_given_its_first_pass_after_start_up(drain_on):
    ok, detail = health.check_slurm(health.PROCESS_STARTED + 60)
    assert ok and "slurmctld not asked yet" in detail

    ok, detail = health.check_slurm(LATER)

    assert not ok
    assert "no drain pass has asked slurmctld in the 100000 s since start-up" in detail
    assert "mac logs worker" in detail


def test_a_stale_pass_is_not_news_with_the_drain_off(drain_on, settings):
    link.answered("slurmctld (primary) at ctl answers", now=LATER)
    settings.SLURM_DRAIN = DrainMode.OFF

    assert health.scheduler_checks(LATER + 100_000) == {}


def test_health_says_which_node_map_the_pass_cannot_read_even_with_the_drain_off(
    drain_on, settings, client, tmp_path
):
    settings.SLURM_DRAIN = DrainMode.OFF
    settings.SLURM_NODE_MAP = f"@{tmp_path / 'names'}"
    with pytest.raises(ImproperlyConfigured):
        NodeNameMap.from_settings()  # as the job read or the drain pass meets it

    answer = client.get("/health").json()

    # degraded, not failed (whatever else this worker's state fails: a sweep long past)
    assert "slurm_node_map" in answer["degraded"] and "slurm_node_map" not in answer["failed"]
    detail = answer["checks"]["slurm_node_map"]["detail"]
    assert detail.startswith(f"MAC_SLURM_NODE_MAP='@{tmp_path / 'names'}': cannot read ")
    assert "the drain and job attribution stop at it" in detail
    assert "slurm" not in answer["checks"]
