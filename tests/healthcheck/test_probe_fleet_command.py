"""`manage.py probe_fleet`: one sweep on demand, refused while another runs."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from contract.liveness import run_probe
from healthcheck import sweep
from healthcheck.fence import claim_fence
from healthcheck.state import RUNNING_KEY, sweep_lock
from inventory.models import Node
from testkit.simfleet import Mode

pytestmark = pytest.mark.django_db


def test_it_sweeps_now_and_reports(fleet, make_node, fast_probes, sd_dir, sweep_redis):
    runner = fleet(2)
    runner.set_node_mode(1, Mode.REFUSE)
    for node in runner.nodes:
        make_node(ip=node.ip)
    out = StringIO()

    call_command("probe_fleet", stdout=out)

    assert "Swept 2 nodes" in out.getvalue()
    assert "1 online, 1 offline, 2 changed" in out.getvalue()
    assert sorted(Node.objects.values_list("status", flat=True)) == ["offline", "online"]


def test_it_refuses_while_a_sweep_runs(sweep_redis, fast_probes):
    holder = sweep_lock(sweep_redis)
    assert holder.acquire()
    try:
        with pytest.raises(CommandError, match="already running"):
            call_command("probe_fleet")
    finally:
        holder.release()


def test_it_says_the_sweep_lost_its_lock_when_it_did(
    fleet, make_node, fast_probes, sd_dir, sweep_redis, monkeypatch
):
    for node in fleet(1).nodes:
        make_node(ip=node.ip)

    def probe_while_a_newer_sweep_starts(*args, **kwargs):
        claim_fence()  # a newer sweep took the fence while this one probed
        return run_probe(*args, **kwargs)

    monkeypatch.setattr(sweep, "run_probe", probe_while_a_newer_sweep_starts)

    with pytest.raises(CommandError, match="lost its lock") as refused:
        call_command("probe_fleet")

    assert "already running" not in str(refused.value)
    assert not sweep_redis.exists(RUNNING_KEY)  # released: the next sweep may run
