"""The GPU verdicts through real sweeps of simulated H200 and MI300X nodes."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from healthcheck.sweep import run_sweep
from inventory import services
from inventory.choices import EventKind
from inventory.models import GpuFault, GpuHealth, Node
from inventory.services.health import node_verdicts
from testkit.simfleet import Mode

pytestmark = pytest.mark.django_db
WINDOW = 1.5  # seconds an event counts on the simulated agents


@pytest.fixture
def gpu_nodes(fleet, fast_probes, sd_dir, sweep_redis):
    """One 8x H200 node and one 8x MI300X node, registered as their agents would."""
    runner = fleet(2, profiles="nvidia=1,amd=1", fault_rate=0, evidence_window=WINDOW)
    nodes = {}
    for sim in runner.nodes:
        result = services.register_node(
            services.Registration(
                hostname=sim.hostname, ip=sim.ip, exporters=sim.exporters(), **sim.registration()
            ),
            source=sim.ip,
        )
        nodes[sim.hardware.profile.name] = result.node
    run_sweep()  # the first verdicts: every GPU healthy
    return runner, nodes


def fresh(node: Node) -> Node:
    return Node.objects.get(pk=node.pk)


def gpu(node: Node, index: int) -> GpuHealth:
    return GpuHealth.objects.get(node=node, index=index)


def test_every_gpu_has_a_row_and_the_nodes_start_healthy(gpu_nodes):
    _runner, nodes = gpu_nodes
    for node in nodes.values():
        node = fresh(node)
        assert (node.health_state, node.health_action, node.health_evidence) == (
            "healthy", "none", ""
        )  # fmt: skip
        assert node.gpus.count() == 8 and node.boot_id
        assert {g.state for g in node.gpus.all()} == {"healthy"}
    assert gpu(nodes["nvidia"], 3).serial and gpu(nodes["amd"], 3).uuid


def test_xid_79_on_gpu_3_makes_the_node_unhealthy_with_a_reboot_in_one_sweep(gpu_nodes):
    runner, nodes = gpu_nodes
    node = nodes["nvidia"]
    runner.inject(node.ip, "xid", 3, 79)
    stats = run_sweep()
    node = fresh(node)
    row = gpu(node, 3)
    assert (node.health_state, node.health_action) == ("unhealthy", "reboot")
    assert node.health_evidence.startswith(
        f"GPU 3 (UUID {row.uuid}, serial {row.serial}) XID 79: GPU has fallen off the bus at "
    )
    assert node.health_evidence.endswith("; reboot") and node.health_streak == 1
    assert (row.state, row.action) == ("unhealthy", "reboot")
    assert row.evidence[0]["source"] == "xid" and row.evidence[0]["code"] == "79"
    assert gpu(node, 2).state == "healthy"
    event = node.events.get(kind=EventKind.HEALTH_UNHEALTHY)
    assert event.message == f"GPU verdict unhealthy: {node.health_evidence}"
    assert event.data["gpus"][0]["serial"] == row.serial
    assert event.data["gpus"][0]["found"] == row.evidence  # whole, for the jobs' reports
    assert stats.verdicts_changed == 1


def test_xid_13_is_the_jobs_fault_not_the_nodes(gpu_nodes):
    runner, nodes = gpu_nodes
    runner.inject(nodes["nvidia"].ip, "xid", 0, 13)
    run_sweep()
    node = fresh(nodes["nvidia"])
    assert (node.health_state, node.health_action) == ("healthy", "restart_app")
    assert "XID 13: graphics engine exception" in node.health_evidence
    assert node.health_evidence.endswith("; restart_app")


def test_an_unchanged_answer_is_neither_parsed_nor_written_only_the_streak_grows(gpu_nodes):
    _runner, nodes = gpu_nodes
    before = {n.pk: fresh(n) for n in nodes.values()}
    with CaptureQueriesContext(connection) as queries:
        run_sweep()
    writes = [
        q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT"))
    ]
    assert not [
        sql for sql in writes if "inventory_gpuhealth" in sql or "inventory_nodeevent" in sql
    ]
    inventory = [sql for sql in writes if '"inventory_node"' in sql]
    assert len(inventory) == 1 and '"last_seen"' in inventory[0] and "health_streak" in inventory[0]
    for pk, old in before.items():
        new = Node.objects.get(pk=pk)
        assert new.health_streak == old.health_streak + 1
        assert new.health_since == old.health_since


def test_heal_clears_the_verdict_once_the_evidence_window_has_passed(gpu_nodes):
    runner, nodes = gpu_nodes
    node = nodes["nvidia"]
    runner.inject(node.ip, "gpu_lost", 5, length=float("inf"))
    run_sweep()
    assert fresh(node).health_state == "unhealthy"
    runner.heal(node.ip)
    run_sweep()
    assert fresh(node).health_state == "unhealthy"  # XID 79 of the loss: still in its window
    time.sleep(WINDOW + 0.2)
    run_sweep()
    node = fresh(node)
    assert (node.health_state, node.health_action, node.health_evidence) == (
        "healthy", "none", ""
    )  # fmt: skip
    assert node.health_streak == 1
    assert node.events.filter(kind=EventKind.HEALTH_HEALTHY).exists()


def test_the_same_xid_after_a_reboot_escalates_even_across_a_reregistration(gpu_nodes):
    runner, nodes = gpu_nodes
    node = nodes["nvidia"]
    runner.inject(node.ip, "xid", 3, 79)
    run_sweep()
    assert fresh(node).health_action == "reboot"
    first_boot = fresh(node).boot_id
    runner.reboot(node.ip)
    run_sweep()
    assert fresh(node).health_state == "healthy" and fresh(node).boot_id != first_boot
    sim = runner.fleet.by_ip[node.ip]
    services.register_node(  # the agent starts again after the reboot: it re-registers
        services.Registration(
            hostname=sim.hostname, ip=sim.ip, exporters=sim.exporters(), **sim.registration()
        ),
        source=sim.ip,
    )
    runner.inject(node.ip, "xid", 3, 79)
    run_sweep()
    node = fresh(node)
    assert (node.health_state, node.health_action) == ("unhealthy", "inspect_hardware")
    assert "XID 79: GPU has fallen off the bus, back after 1 reboot(s)" in node.health_evidence
    serial = gpu(node, 3).serial
    assert GpuFault.objects.filter(gpu=serial, fault="xid:79").count() == 2
    # each kept under the GPU's own index (a job's report reads them by it)
    assert set(GpuFault.objects.values_list("gpu_index", flat=True)) == {3}
    # Another GPU's first XID 79 is no repeat.
    runner.inject(node.ip, "xid", 4, 79)
    run_sweep()
    assert gpu(fresh(node), 4).action == "reboot"


def test_amd_ecc_the_health_flag_and_a_gpu_gone_from_the_inventory(gpu_nodes):
    runner, nodes = gpu_nodes
    node = nodes["amd"]
    gone = gpu(node, 6)
    runner.inject(node.ip, "ecc", 2)
    runner.inject(node.ip, "amd_health", 4, length=float("inf"))
    runner.inject(node.ip, "gpu_lost", 6, length=float("inf"))
    run_sweep()
    node = fresh(node)
    assert (node.health_state, node.health_action) == ("unhealthy", "reboot")
    assert (gpu(node, 2).state, gpu(node, 2).action) == ("unhealthy", "reboot")
    assert gpu(node, 2).evidence[0]["source"] in ("ecc", "amd_health")
    assert (gpu(node, 4).state, gpu(node, 4).action) == ("unhealthy", "reboot")
    missing = gpu(node, 6)
    assert (missing.state, missing.action, missing.uuid) == ("unhealthy", "reboot", gone.uuid)
    assert missing.evidence[0]["detail"] == (
        "missing: the exporter reports 7 of the 8 GPUs registered"
    )


def test_a_gpu_exporter_that_does_not_answer_leaves_the_verdict_as_it_was(gpu_nodes):
    runner, nodes = gpu_nodes
    node = fresh(nodes["nvidia"])
    runner.set_mode(node.ip, "dcgm-exporter", Mode.REFUSE)
    run_sweep()
    after = fresh(node)
    assert (after.health_state, after.health_streak) == (node.health_state, node.health_streak)


def test_node_verdicts_lists_every_node_for_the_scheduler_link(gpu_nodes):
    runner, nodes = gpu_nodes
    runner.inject(nodes["nvidia"].ip, "xid", 1, 48)
    run_sweep()
    verdicts = {row["hostname"]: row for row in node_verdicts()}
    nvidia = verdicts[nodes["nvidia"].hostname]
    assert (nvidia["state"], nvidia["action"], nvidia["streak"]) == ("unhealthy", "reset_gpu", 1)
    assert nvidia["evidence"].startswith("GPU 1 ") and nvidia["since"] is not None
    assert verdicts[nodes["amd"].hostname]["streak"] == 2
    assert set(nvidia) == {
        "id", "hostname", "state", "action", "evidence", "since", "streak", "maintenance",
        "boot_id",
    }  # fmt: skip
    assert nvidia["boot_id"] == Node.objects.get(pk=nodes["nvidia"].pk).boot_id != ""


def test_a_repaired_gpus_history_forgotten_ends_its_escalation_at_the_next_sweep(gpu_nodes, staff):
    from rest_framework.test import APIClient

    runner, nodes = gpu_nodes
    node = nodes["nvidia"]
    runner.inject(node.ip, "xid", 3, 79)
    run_sweep()
    runner.reboot(node.ip)
    run_sweep()
    runner.inject(node.ip, "xid", 3, 79, length=60)  # still there at the sweeps below
    run_sweep()
    assert fresh(node).health_action == "inspect_hardware"
    serial = gpu(node, 3).serial
    run_sweep()  # the same answer: not judged again, the escalation stays
    assert fresh(node).health_action == "inspect_hardware"

    api = APIClient()
    api.force_authenticate(staff)
    answer = api.delete(f"/api/v1/nodes/{node.pk}/gpus/3/faults")

    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "id": node.pk, "hostname": node.hostname, "index": 3, "gpu": serial, "forgotten": 2,
    }  # fmt: skip
    event = fresh(node).events.get(kind=EventKind.FAULTS_FORGOTTEN)
    assert event.actor == "api:admin" and f"GPU 3 ({serial}): 2 boot(s)" in event.message
    run_sweep()  # the same answer, judged afresh: this boot's fault is its first
    node = fresh(node)
    assert (node.health_state, node.health_action) == ("unhealthy", "reboot")
    assert "back after" not in node.health_evidence
    assert GpuFault.objects.filter(gpu=serial).count() == 1


def _judged_from_two_boots(runner, node):
    """XID 79 on GPU 3 in two boots, and a sweep that has judged (not yet written) the
    escalation from that history: (its judgement, its time)."""
    from django.utils import timezone

    from healthcheck.sweep import judge, load_nodes, probe_nodes

    runner.inject(node.ip, "xid", 3, 79)
    run_sweep()
    runner.reboot(node.ip)
    run_sweep()
    runner.inject(node.ip, "xid", 3, 79, length=60)
    rows = load_nodes()
    now = timezone.now()
    return judge(rows, probe_nodes(rows), now), now


def test_a_forget_between_a_sweeps_judgement_and_its_write_is_not_undone(gpu_nodes):
    from healthcheck.sweep import save_changes

    runner, nodes = gpu_nodes
    node = nodes["nvidia"]
    # This sweep reads the history of both boots and judges an escalation...
    judgement, now = _judged_from_two_boots(runner, node)
    assert judgement.health.nodes[node.pk]["health_action"] == "inspect_hardware"
    # ...the GPU is repaired and its history forgotten before that sweep writes...
    assert services.forget_gpu_faults(fresh(node), 3, actor="admin:ops") is not None

    save_changes(judgement, now)

    # ...so it writes neither the escalation nor its event, and leaves the node to be
    # judged afresh: the escalation the history no longer holds is never shown.
    node = fresh(node)
    assert node.health_action == "none" and node.health_digest.startswith("forgotten:")
    assert not node.events.filter(kind=EventKind.HEALTH_UNHEALTHY, data__action="inspect_hardware")
    run_sweep()
    node = fresh(node)
    assert (node.health_state, node.health_action) == ("unhealthy", "reboot")
    assert "back after" not in node.health_evidence
    assert GpuFault.objects.filter(gpu=gpu(node, 3).serial).count() == 1


def test_a_sweep_judged_before_an_admins_forget_of_rows_is_not_undone(gpu_nodes):
    from healthcheck.sweep import save_changes

    runner, nodes = gpu_nodes
    node = nodes["nvidia"]
    judgement, now = _judged_from_two_boots(runner, node)
    other = nodes["amd"]
    before = fresh(other).health_digest

    assert services.forget_fault_rows(GpuFault.objects.all(), actor="admin:ops") == 1
    save_changes(judgement, now)

    assert fresh(node).health_action == "none"  # as before: the judgement was overtaken
    assert fresh(other).health_digest == before  # a node without those GPUs is untouched
    run_sweep()
    assert fresh(node).health_action == "reboot"


def test_two_attempts_of_one_chunk_write_a_verdict_change_and_its_event_once(gpu_nodes):
    from django.utils import timezone

    from healthcheck.sweep import judge, load_nodes, probe_nodes, save_changes

    runner, nodes = gpu_nodes
    node = nodes["nvidia"]
    runner.inject(node.ip, "xid", 3, 79, length=60)
    rows = load_nodes()  # both attempts loaded and probed before either saved
    probes = probe_nodes(rows)
    now = timezone.now()
    first, second = judge(rows, probes, now), judge(rows, probes, now)

    save_changes(first, now)
    save_changes(second, now)

    assert fresh(node).health_action == "reboot"
    assert node.events.filter(kind=EventKind.HEALTH_UNHEALTHY).count() == 1
    assert second.health.nodes == {} and second.health.events == []
