"""One sweep over a simulated fleet: statuses, reasons, events, last_seen, targets, one push."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.test.utils import CaptureQueriesContext

from healthcheck.state import last_sweep
from healthcheck.sweep import run_sweep
from inventory.choices import Diagnosis, EventKind, NodeStatus, StatusReason
from inventory.live import join_dashboard, leave_dashboard
from inventory.models import Node, NodeEvent
from testkit.channel_layer import receive_within
from testkit.simfleet import Mode

pytestmark = pytest.mark.django_db


@pytest.fixture
def six_nodes(fleet, make_node, fast_probes, sd_dir, sweep_redis):
    """answer, refuse, hang, black-hole, bad body, forwarding-off (sys hangs, nic answers)."""
    runner = fleet(6)
    runner.set_mode(1, "sys-exporter", Mode.REFUSE)
    runner.set_mode(1, "nic-exporter", Mode.REFUSE)
    runner.set_mode(2, "sys-exporter", Mode.HANG)
    runner.set_mode(2, "nic-exporter", Mode.HANG)
    runner.set_node_mode(3, Mode.BLACKHOLE)
    runner.set_mode(4, "sys-exporter", Mode.BAD_BODY)
    runner.set_mode(5, "sys-exporter", Mode.BLACKHOLE)
    nodes = [make_node(ip=node.ip) for node in runner.nodes]
    return runner, nodes


def test_it_marks_each_node_with_the_right_status_reason_and_diagnosis(six_nodes):
    _runner, nodes = six_nodes

    stats = run_sweep()

    got = {
        n.hostname: (n.status, n.status_reason, n.diagnosis) for n in Node.objects.order_by("id")
    }
    expected = [
        (NodeStatus.ONLINE, StatusReason.OK, Diagnosis.NONE),
        (NodeStatus.OFFLINE, StatusReason.REFUSED, Diagnosis.SERVICE_DOWN),
        (NodeStatus.OFFLINE, StatusReason.TIMEOUT, Diagnosis.HOST_DOWN),
        (NodeStatus.OFFLINE, StatusReason.TIMEOUT, Diagnosis.HOST_DOWN),
        (NodeStatus.OFFLINE, StatusReason.BAD_BODY, Diagnosis.EXPORTER_BROKEN),
        (NodeStatus.OFFLINE, StatusReason.TIMEOUT, Diagnosis.IP_FORWARD_OFF),
    ]
    assert list(got.values()) == expected
    assert stats.online == 1 and stats.offline == 5 and stats.changed == 6
    online = Node.objects.get(pk=nodes[0].pk)
    assert online.last_seen is not None
    assert online.exporter_health == {"nic-exporter": True, "sys-exporter": True}
    assert Node.objects.get(pk=nodes[5].pk).exporter_health == {
        "nic-exporter": True,
        "sys-exporter": False,
    }
    assert Node.objects.get(pk=nodes[1].pk).last_seen is None


def test_every_status_change_is_an_event_with_its_reason(six_nodes):
    _runner, nodes = six_nodes
    run_sweep()

    events = {e.node_id: e for e in NodeEvent.objects.all()}
    assert set(events) == {node.pk for node in nodes}
    assert events[nodes[0].pk].kind == EventKind.ONLINE
    forward = events[nodes[5].pk]
    assert forward.kind == EventKind.OFFLINE
    assert forward.data["reason"] == "timeout"
    assert forward.data["diagnosis"] == "ip_forward_off"
    assert "IPv4" in forward.message or "forwarding" in forward.message


def test_a_second_identical_sweep_writes_nothing_but_last_seen(six_nodes):
    run_sweep()
    events_before = NodeEvent.objects.count()

    with CaptureQueriesContext(connection) as queries:
        stats = run_sweep()

    writes = [
        q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT"))
    ]
    inventory = [sql for sql in writes if '"healthcheck_sweepfence"' not in sql]
    assert stats.changed == 0
    assert NodeEvent.objects.count() == events_before
    assert len(inventory) == 1 and '"last_seen"' in inventory[0]
    # Besides: the sweep's fencing token, claimed at its start and checked at its write.
    assert len(writes) == 3


def test_a_node_that_recovers_is_online_on_the_next_sweep(six_nodes):
    runner, nodes = six_nodes
    run_sweep()
    runner.set_node_mode(1, Mode.ANSWER)

    stats = run_sweep()

    node = Node.objects.get(pk=nodes[1].pk)
    assert (node.status, node.status_reason, node.diagnosis) == ("online", "ok", "")
    assert node.status_detail == ""
    assert stats.went_online == 1 and stats.changed == 1
    assert NodeEvent.objects.filter(node=node, kind=EventKind.ONLINE).count() == 1


def test_maintenance_nodes_are_probed_but_their_events_are_flagged(
    fleet, make_node, fast_probes, sd_dir, sweep_redis
):
    runner = fleet(1)
    runner.set_node_mode(0, Mode.REFUSE)
    node = make_node(ip=runner.nodes[0].ip, maintenance=True)

    run_sweep()

    node.refresh_from_db()
    assert node.status == NodeStatus.OFFLINE
    event = NodeEvent.objects.get(node=node)
    assert event.data["maintenance"] is True
    assert event.message.startswith("[maintenance]")


def test_one_broadcast_carries_every_change(six_nodes):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(join_dashboard)(layer, channel)
    try:
        run_sweep()
        message = async_to_sync(receive_within)(layer, channel, 10)
    finally:
        async_to_sync(leave_dashboard)(layer, channel)
    assert message["type"] == "nodes.changed"
    assert len(message["changes"]) == 6
    first = message["changes"][0]
    assert set(first) == set(Node.objects.first().summary())
    [online] = [c for c in message["changes"] if c["status"] == "online"]
    assert online["last_seen"] is not None and online["status_reason"] == "ok"


def test_no_change_no_broadcast(six_nodes):
    run_sweep()
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(join_dashboard)(layer, channel)
    try:
        run_sweep()

        with pytest.raises(TimeoutError):
            async_to_sync(receive_within)(layer, channel, 0.5)
    finally:
        async_to_sync(leave_dashboard)(layer, channel)


def test_sys_exporter_json_lists_only_online_nodes(six_nodes, sd_dir):
    runner, nodes = six_nodes
    run_sweep()

    groups = json.loads((sd_dir / "sys-exporter.json").read_text())
    assert [g["targets"] for g in groups] == [[f"{runner.nodes[0].ip}:29101"]]
    assert groups[0]["labels"] == {
        "cluster_name": "mac",
        "node": str(nodes[0].pk),
        "hostname": nodes[0].hostname,
        "gpu_vendor": "none",
        "maintenance": "false",
    }
    assert json.loads((sd_dir / "dcgm-exporter.json").read_text()) == []


def test_nic_exporter_json_lists_every_node_whose_nic_exporter_answered(six_nodes, sd_dir):
    runner, _nodes = six_nodes
    run_sweep()

    groups = json.loads((sd_dir / "nic-exporter.json").read_text())
    # Online (0), exporter broken but host up (4), forwarding off (5); not the
    # refused, hanging or black-holed ones.
    assert [g["targets"] for g in groups] == [[f"{runner.nodes[i].ip}:29500"] for i in (0, 4, 5)]


def test_forwarding_off_keeps_nic_exporter_scraped_while_the_node_is_offline(
    fleet, make_node, fast_probes, sd_dir, sweep_redis
):
    runner = fleet(1)
    runner.set_mode(0, "sys-exporter", Mode.BLACKHOLE)
    ip = runner.nodes[0].ip
    node = make_node(ip=ip)

    stats = run_sweep()

    node.refresh_from_db()
    assert (node.status, node.status_reason, node.diagnosis) == (
        NodeStatus.OFFLINE,
        StatusReason.TIMEOUT,
        Diagnosis.IP_FORWARD_OFF,
    )
    assert node.exporter_health == {"nic-exporter": True, "sys-exporter": False}
    nic = json.loads((sd_dir / "nic-exporter.json").read_text())
    assert nic == [
        {
            "targets": [f"{ip}:29500"],
            "labels": {
                "cluster_name": "mac",
                "node": str(node.pk),
                "hostname": node.hostname,
                "gpu_vendor": "none",
                "maintenance": "false",
            },
        }
    ]
    assert json.loads((sd_dir / "sys-exporter.json").read_text()) == []
    assert "nic-exporter" in stats.targets_rewritten

    # Forwarding back on: sys-exporter returns, nic-exporter's file is left alone.
    runner.set_mode(0, "sys-exporter", Mode.ANSWER)
    stats = run_sweep()
    assert Node.objects.get(pk=node.pk).status == NodeStatus.ONLINE
    assert stats.targets_rewritten == ["sys-exporter"]
    sys_groups = json.loads((sd_dir / "sys-exporter.json").read_text())
    assert [g["targets"] for g in sys_groups] == [[f"{ip}:29101"]]


def test_sweep_figures_are_recorded_for_health_and_metrics(six_nodes, sweep_redis):
    run_sweep()
    last = last_sweep(sweep_redis)
    assert last["nodes"] == 6 and last["online"] == 1 and last["offline"] == 5
    assert last["probes"] == 12
    assert last["outcomes"]["ok"] >= 1 and last["outcomes"]["timeout"] >= 3
    assert last["finished_at"] >= last["started_at"]


def test_a_node_deleted_during_the_sweep_does_not_break_it(six_nodes):
    _runner, nodes = six_nodes

    def probe_then_delete(targets):
        from contract.liveness import run_probe

        results = run_probe(targets, timeout=0.5)
        Node.objects.filter(pk=nodes[0].pk).delete()
        return results

    stats = run_sweep(probe=probe_then_delete)
    assert stats.nodes == 6
    assert not NodeEvent.objects.filter(hostname=nodes[0].hostname).exists()


def test_the_targets_say_what_changed_while_the_probe_ran(fleet, make_node, fast_probes, sd_dir):
    """Deregistered, renamed, put in maintenance or moved during the probe: written as the
    node now is, not as the probe found it (docs/probing.md)."""
    runner = fleet(3)
    nodes = [make_node(ip=node.ip) for node in runner.nodes]
    run_sweep()
    assert len(json.loads((sd_dir / "sys-exporter.json").read_text())) == 3

    def probe_while_the_inventory_changes(targets):
        from contract.liveness import run_probe

        results = run_probe(targets, timeout=0.5)
        Node.objects.filter(pk=nodes[0].pk).delete()  # mac stop agent
        Node.objects.filter(pk=nodes[1].pk).update(hostname="renamed", maintenance=True)
        Node.objects.filter(pk=nodes[2].pk).update(ip="198.18.9.9")
        return results

    stats = run_sweep(probe=probe_while_the_inventory_changes)

    listed = {
        group["labels"]["node"]: (group["labels"]["hostname"], group["labels"]["maintenance"],
                                  group["targets"])
        for group in json.loads((sd_dir / "sys-exporter.json").read_text())
    }  # fmt: skip
    assert listed == {
        str(nodes[1].pk): ("renamed", "true", [f"{nodes[1].ip}:29101"]),
        str(nodes[2].pk): (nodes[2].hostname, "false", ["198.18.9.9:29101"]),
    }
    assert (stats.online, stats.maintenance) == (2, 1)  # the fleet after the sweep
