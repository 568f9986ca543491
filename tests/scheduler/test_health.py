"""/health's scheduler checks (scheduler.health): the drain budget names its nodes only to a
logged-in caller; /health answers anyone, and the deregister endpoint is built so that
strangers cannot list the inventory's names."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from contract.drainpolicy import DrainMode
from scheduler import drainpass
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
