"""The drain against a real Slurm lab: real sweeps of simulated H200 nodes, real scontrol.

In the test process (the flows that cross the master's processes are in
test_drain_end_to_end.py): a fault injected into the simulated fleet, `run_sweep()`
reads the verdict, `run_drain_pass()` acts on the lab, and the test reads the lab with
Slurm's own tools. Twenty nodes, so the budget's 10 % is two of them.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator

import pytest

from contract.drainpolicy import DrainMode
from healthcheck.health import run_health_checks
from healthcheck.metrics import master_registry
from healthcheck.sweep import run_sweep
from inventory.choices import EventKind, SlurmHold
from inventory.models import Node, NodeEvent
from scheduler import link
from scheduler.drainpass import run_drain_pass
from scheduler.slurm import SlurmClient, SlurmNode
from testkit.alerting import AlertmanagerServer
from testkit.ports import free_port
from testkit.simfleet import Fault
from testkit.waiting import wait_for
from tests.scheduler.conftest import macs_alertmanager

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SLURM_KINDS = [kind for kind in EventKind.values if kind.startswith("slurm_")]


def slurm_node(drain, index: int) -> SlurmNode:
    return SlurmClient(drain.lab.conf).node(drain.host(index))


def mac_node(drain, index: int) -> Node:
    return Node.objects.get(hostname=drain.host(index))


def slurm_events(drain, index: int) -> list[NodeEvent]:
    return list(
        NodeEvent.objects.filter(hostname=drain.host(index), kind__in=SLURM_KINDS).order_by("id")
    )


def sweep_and_drain():
    run_sweep()
    return run_drain_pass()


@pytest.fixture
def alertmanager(drain, settings, tmp_path) -> Iterator[AlertmanagerServer]:
    """Debian's Alertmanager on the configuration MAC writes, for the budget's alert."""
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"
    with macs_alertmanager(settings, tmp_path) as server:
        yield server


def test_faults_on_five_of_twenty_nodes_drain_two_and_fire_the_budget_alert(drain, alertmanager):
    sick = [3, 7, 11, 15, 19]
    for index in sick:
        drain.fleet.inject(drain.ip(index), Fault.GPU_LOST, 3)
        time.sleep(0.01)  # one after the other: the oldest verdicts are drained first
    result = sweep_and_drain()

    drained = [i for i in sick if slurm_node(drain, i).drain]
    assert len(drained) == 2 and result.plan.limit == 2
    for index in drained:
        node = slurm_node(drain, index)
        assert node.reason == f"MAC: {mac_node(drain, index).health_evidence}"
        assert mac_node(drain, index).slurm_hold == SlurmHold.MAC
    held_back = [drain.host(i) for i in sick if i not in drained]
    for index in (i for i in sick if i not in drained):
        assert not slurm_node(drain, index).drain
        [event] = slurm_events(drain, index)
        assert event.kind == EventKind.SLURM_NOT_DRAINED
        assert "the drain budget is spent (MAC keeps 2 of the 2 nodes" in event.message
        assert "would have drained with: MAC: GPU 3" in event.message

    alerts = wait_for(
        lambda: [
            a
            for a in alertmanager.get("/api/v2/alerts")
            if a["labels"]["alertname"] == "MacDrainBudgetSpent"
        ],
        timeout=10,
        what="MacDrainBudgetSpent in Alertmanager",
    )
    annotations = alerts[0]["annotations"]
    assert annotations["would_drain"] == ", ".join(sorted(held_back, key=held_back.index))
    assert "MAC keeps 2 of 20 Slurm nodes drained (MAC_DRAIN_BUDGET=10%)" in annotations["summary"]
    health = run_health_checks()
    assert "drain_budget" in health["degraded"]
    assert (
        "would have drained: " + ", ".join(held_back) in health["checks"]["drain_budget"]["detail"]
    )

    # The next passes change nothing and say nothing again.
    sweep_and_drain()
    assert [i for i in sick if slurm_node(drain, i).drain] == drained
    assert all(len(slurm_events(drain, i)) == 1 for i in sick)
    metrics = master_registry()
    assert metrics.get_sample_value(
        "mac_slurm_drain_decisions_total", {"decision": "drain", "dry_run": "false"}
    ) == 2  # fmt: skip
    assert metrics.get_sample_value(
        "mac_slurm_drain_decisions_total", {"decision": "over_budget", "dry_run": "false"}
    ) == 3  # fmt: skip
    assert metrics.get_sample_value("mac_slurm_drain_held_back_nodes") == 3
    assert metrics.get_sample_value("mac_slurm_up") == 1
    assert metrics.get_sample_value("mac_slurm_drain_budget_nodes") == 2
    assert metrics.get_sample_value("mac_slurm_drained_nodes") == 2


def test_dry_run_changes_nothing_in_slurm_and_records_what_it_would_do(drain, settings):
    settings.SLURM_DRAIN = DrainMode.DRY_RUN
    drain.fleet.inject(drain.ip(4), Fault.XID, 3, 79)
    result = sweep_and_drain()
    assert not result.done
    assert set(drain.lab.node_states().values()) == {"idle"}
    evidence = mac_node(drain, 4).health_evidence
    [event] = slurm_events(drain, 4)
    assert event.kind == EventKind.SLURM_DRY_RUN
    assert event.message == (
        f"Dry run (MAC_SLURM_DRAIN=dry-run): would drain {drain.host(4)}: MAC: {evidence}"
    )
    assert event.data["decision"] == "drain" and event.data["dry_run"] is True
    sweep_and_drain()
    assert len(slurm_events(drain, 4)) == 1  # recorded once
    assert set(drain.lab.node_states().values()) == {"idle"}
    assert mac_node(drain, 4).slurm_hold == SlurmHold.NONE
    assert master_registry().get_sample_value(
        "mac_slurm_drain_decisions_total", {"decision": "drain", "dry_run": "true"}
    ) == 1  # fmt: skip


def test_a_reboot_is_asked_once_and_the_same_xid_after_it_is_drained_as_inspect_hardware(
    drain, settings
):
    settings.SLURM_REBOOT = True
    host = drain.host(5)
    drain.fleet.inject(drain.ip(5), Fault.XID, 3, 79)
    result = sweep_and_drain()
    assert [str(step.decision) for step in result.done] == ["reboot"]
    wait_for(lambda: drain.lab.reboots(host), timeout=30, what=f"the lab's reboot of {host}")
    drain.lab.wait_nodes("idle", nodes=[host])  # nextstate=RESUME
    [event] = slurm_events(drain, 5)
    assert event.kind == EventKind.SLURM_REBOOT and event.message.startswith(
        f"Asked Slurm to reboot {host} once empty, then resume it: MAC: GPU 3 "
    )

    # The agent still reports the boot MAC asked to end: drained, never rebooted again.
    result = sweep_and_drain()
    assert [str(step.decision) for step in result.done] == ["drain"]
    reason = slurm_node(drain, 5).reason
    assert reason.startswith("MAC: GPU 3 ") and "XID 79" in reason and reason.endswith("; reboot")
    assert len(drain.lab.reboots(host)) == 1

    # A new boot, and the same XID again: inspect_hardware, in Slurm's reason too.
    drain.fleet.reboot(drain.ip(5))
    run_sweep()
    drain.fleet.inject(drain.ip(5), Fault.XID, 3, 79)
    result = sweep_and_drain()
    node = mac_node(drain, 5)
    assert (node.health_state, node.health_action) == ("unhealthy", "inspect_hardware")
    assert [str(step.decision) for step in result.done] == ["reason"]
    reason = slurm_node(drain, 5).reason
    assert reason == f"MAC: {node.health_evidence}"
    assert "back after 1 reboot(s)" in reason and reason.endswith("; inspect_hardware")
    assert slurm_node(drain, 5).drain
    assert len(drain.lab.reboots(host)) == 1
    assert node.slurm_reason == reason and node.slurm_hold == SlurmHold.MAC


def test_a_gpu_back_without_a_reboot_stays_drained_until_the_node_boots_again(drain):
    host = drain.host(10)
    drain.fleet.inject(drain.ip(10), Fault.REMAP_FAILURE, 2)  # a condition, no XID
    assert [str(step.decision) for step in sweep_and_drain().done] == ["drain"]
    drain.fleet.heal(drain.ip(10))  # gone from NVML's answer, on the same boot
    for _ in range(5):  # healthy for longer than MAC_SLURM_RESUME_SWEEPS
        assert not sweep_and_drain().done
    assert mac_node(drain, 10).health_state == "healthy"
    assert slurm_node(drain, 10).drain and slurm_node(drain, 10).reason_is_mac
    [_, waiting] = slurm_events(drain, 10)
    assert waiting.kind == EventKind.SLURM_NOT_DRAINED
    assert waiting.message.startswith(f"Not resumed: {host} has not booted since its fault")
    assert f"scontrol reboot ASAP nextstate=RESUME {host}" in waiting.message
    drain.fleet.reboot(drain.ip(10))
    # The streak starts again on the new boot: its own 3 healthy sweeps (the fixture's
    # MAC_SLURM_RESUME_SWEEPS), not the old boot's, resume it.
    for _ in range(2):
        assert not sweep_and_drain().done
    assert [str(step.decision) for step in sweep_and_drain().done] == ["resume"]
    assert not slurm_node(drain, 10).drain
    assert [e.kind for e in slurm_events(drain, 10)] == [
        EventKind.SLURM_DRAIN,
        EventKind.SLURM_NOT_DRAINED,
        EventKind.SLURM_RESUME,
    ]


def test_a_reservation_and_an_unknown_name_are_left_alone_and_recorded_once(drain, settings):
    host = drain.host(6)
    drain.lab.scontrol(
        "create", "reservation", "ReservationName=mac-test-window", f"Nodes={host}",
        "StartTime=now", "Duration=10", "Users=root", "Flags=MAINT",
    )  # fmt: skip
    settings.SLURM_NODE_MAP = f"{drain.host(8)}=gpu-not-in-slurm"
    drain.fleet.inject(drain.ip(6), Fault.GPU_LOST, 0)
    drain.fleet.inject(drain.ip(8), Fault.GPU_LOST, 0)
    sweep_and_drain()
    sweep_and_drain()
    assert not slurm_node(drain, 6).drain and not slurm_node(drain, 8).drain
    [held] = slurm_events(drain, 6)
    assert held.kind == EventKind.SLURM_NOT_DRAINED
    assert f"Not drained: {host} is reserved" in held.message
    [unknown] = slurm_events(drain, 8)
    assert "Slurm has no node named gpu-not-in-slurm" in unknown.message


def test_a_node_an_administrator_set_to_fail_is_theirs(drain):
    host = drain.host(7)
    drain.lab.scontrol("update", f"NodeName={host}", "State=FAIL", "Reason=PSU fan, ticket 88")
    drain.fleet.inject(drain.ip(7), Fault.GPU_LOST, 0)
    sweep_and_drain()
    sweep_and_drain()
    node = slurm_node(drain, 7)
    # A drain would have cleared FAIL and put MAC's reason over the administrator's.
    assert "FAIL" in node.flags and not node.drain and node.reason == "PSU fan, ticket 88"
    [held] = slurm_events(drain, 7)
    assert held.kind == EventKind.SLURM_NOT_DRAINED
    assert f"Not drained: {host} is set to fail by " in held.message


@pytest.fixture
def as_nobody(drain, tmp_path) -> Iterator[SlurmClient]:
    """A client whose scontrol runs as `nobody`: a master whose user may read Slurm but
    not change its nodes (munge's socket opened to it for the test)."""
    if os.geteuid() != 0 or not shutil.which("runuser"):
        pytest.skip("running scontrol as another user needs root and runuser")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "scontrol").write_text(
        f'#!/bin/sh\nexec runuser -u nobody -- {shutil.which("scontrol")} "$@"\n'
    )
    (shim / "scontrol").chmod(0o755)
    munge = drain.lab.munge_socket.parent
    munge.chmod(0o711)
    try:
        path = f"{shim}:{os.environ['PATH']}"
        yield SlurmClient(drain.lab.conf, environ={**os.environ, "PATH": path})
    finally:
        munge.chmod(0o700)


def test_a_drain_slurm_refuses_is_recorded_once_with_slurms_words_and_the_fix(drain, as_nobody):
    host = drain.host(12)
    drain.fleet.inject(drain.ip(12), Fault.GPU_LOST, 1)
    run_sweep()

    result = run_drain_pass(client=as_nobody)

    assert not result.done and not result.error  # the pass went on; slurmctld answered
    assert not slurm_node(drain, 12).drain
    [refused] = slurm_events(drain, 12)
    assert refused.kind == EventKind.SLURM_NOT_DRAINED
    assert refused.data["decision"] == "refused"
    assert refused.message.startswith(
        f"Slurm refused to drain {host}: slurm_update error: Invalid user id; "
    )
    assert "adminlevel=Admin" in refused.message  # what to do about it
    assert master_registry().get_sample_value(
        "mac_slurm_drain_decisions_total", {"decision": "refused", "dry_run": "false"}
    ) == 1  # fmt: skip
    # Refused again at every pass: said once. Given the rights, MAC drains it.
    run_drain_pass(client=as_nobody)
    assert len(slurm_events(drain, 12)) == 1
    run_drain_pass()
    assert slurm_node(drain, 12).drain and slurm_node(drain, 12).reason_is_mac
    assert [e.kind for e in slurm_events(drain, 12)] == [
        EventKind.SLURM_NOT_DRAINED,
        EventKind.SLURM_DRAIN,
    ]


def test_an_unreachable_slurmctld_backs_off_then_the_drain_happens(drain, settings):
    drain.lab.stop_controller()
    try:
        drain.fleet.inject(drain.ip(9), Fault.GPU_LOST, 2)
        started = time.monotonic()
        result = sweep_and_drain()
        assert result.skipped == "slurm unreachable"
        assert time.monotonic() - started < 5  # the ping, not the tools' 9 s retries
        state = link.load()
        assert not state.reachable and state.failures == 1
        assert master_registry().get_sample_value("mac_slurm_up") == 0
        checks = run_health_checks()
        assert "slurm" in checks["degraded"]
        assert "slurmctld unreachable for " in checks["checks"]["slurm"]["detail"]
        assert (
            "MAC drains and resumes nothing until it answers" in checks["checks"]["slurm"]["detail"]
        )
        assert run_drain_pass(now=state.checked_at + 0.1).skipped.startswith(
            "slurmctld unreachable, next try in"
        )
        run_drain_pass(now=state.retry_at)
        assert link.load().failures == 2  # asked again once due, and waits longer now
        assert link.load().retry_at - link.load().checked_at == 2 * settings.PROBE_INTERVAL
    finally:
        drain.lab.start_controller()
    run_drain_pass(now=link.load().retry_at)
    assert slurm_node(drain, 9).drain and slurm_node(drain, 9).reason_is_mac
    assert link.load().reachable
    assert run_health_checks()["checks"]["slurm"]["ok"]
    assert master_registry().get_sample_value("mac_slurm_up") == 1


def test_turning_the_drain_off_forgets_the_slurm_view(drain, settings):
    drain.fleet.inject(drain.ip(2), Fault.GPU_LOST, 1)
    sweep_and_drain()
    assert mac_node(drain, 2).slurm_hold == SlurmHold.MAC
    assert mac_node(drain, 1).slurm_state == "idle"
    settings.SLURM_DRAIN = DrainMode.OFF
    assert run_drain_pass().skipped == "MAC_SLURM_DRAIN=off"
    assert not Node.objects.exclude(slurm_state="").exists()
    assert slurm_node(drain, 2).drain  # MAC changes nothing in Slurm while off


def test_without_slurm_conf_health_says_where_it_looked(drain, settings, tmp_path):
    settings.SLURM_CONF = tmp_path / "missing" / "slurm.conf"
    drain.fleet.inject(drain.ip(7), Fault.GPU_LOST, 0)
    assert sweep_and_drain().skipped == "no slurm.conf"
    detail = run_health_checks()["checks"]["slurm"]["detail"]
    assert detail.startswith("Slurm's tools failing for ")
    assert f"no slurm.conf at {settings.SLURM_CONF}: install it on the master" in detail
    assert set(drain.lab.node_states().values()) == {"idle"}
