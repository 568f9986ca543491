"""What the pages read from a real Alertmanager: groups of firing alerts, nodes per alert."""

from __future__ import annotations

import pytest

from alerting import queries
from alerting.client import Alertmanager
from inventory.models import Node
from testkit.alerting import firing_alerts
from testkit.factories import make_node
from tests.alerting.conftest import needs_alertmanager

pytestmark = [pytest.mark.django_db, needs_alertmanager]


def post(count: int, alertname: str, severity: str, first: int = 1) -> None:
    """`count` alerts, on nodes `first`... of the inventory (made where missing)."""
    nodes = [(n, f"gpu-{n:03d}") for n in range(first, first + count)]
    for pk, hostname in nodes:
        if not Node.objects.filter(pk=pk).exists():
            make_node(hostname, f"10.9.{pk // 250}.{pk % 250 + 1}", pk=pk)
    Alertmanager.from_settings().post_alerts(firing_alerts(nodes, alertname, severity))


def test_firing_alerts_come_in_one_group_per_name_and_severity(alertmanager, monkeypatch):
    monkeypatch.setattr(queries, "GROUP_NODES", 25)
    post(30, "MacNodeOffline", "critical")
    post(20, "MacExporterDown", "warning", first=101)
    post(2, "MacExporterDown", "critical", first=201)

    snapshot = queries.firing_alerts()

    assert snapshot.count == 52
    got = [(g["alertname"], g["severity"], g["count"], len(g["nodes"])) for g in snapshot.groups]
    assert got == [
        ("MacNodeOffline", "critical", 30, 25),  # the most severe, then the largest first
        ("MacExporterDown", "critical", 2, 2),
        ("MacExporterDown", "warning", 20, 20),
    ]
    first = snapshot.groups[0]["nodes"][0]  # the oldest alerts' nodes first
    n = int(first["node"])
    assert first == {"node": str(n), "hostname": f"gpu-{n:03d}", "summary": first["summary"]}
    assert first["summary"] == f"MacNodeOffline on gpu-{n:03d}"


def test_nodes_with_an_alert_are_its_firing_nodes_of_this_cluster(alertmanager):
    post(3, "MacNodeOffline", "critical")
    post(2, "MacExporterDown", "warning", first=2)

    assert queries.nodes_with_alert("MacNodeOffline") == [1, 2, 3]
    assert queries.nodes_with_alert("MacExporterDown") == [2, 3]
    assert queries.nodes_with_alert("GpuXidError") == []


def test_another_cluster_s_alerts_are_not_counted_or_linked(alertmanager, settings):
    """A shared Alertmanager holds other MAC masters' alerts too: their node="1" is not ours."""
    post(2, "MacNodeOffline", "critical")
    client = Alertmanager.from_settings()
    client.post_alerts(firing_alerts([(1, "x-1"), (3, "x-3")], "MacNodeOffline", "critical", "x"))
    client.post_alerts(firing_alerts([(1, "x-1")], "MacExporterDown", "warning", "x"))

    snapshot = queries.firing_alerts()

    assert snapshot.available and snapshot.count == 2
    assert [row["hostname"] for row in snapshot.alerts] == ["gpu-001", "gpu-002"]
    got = [(g["alertname"], g["count"], [n["node"] for n in g["nodes"]]) for g in snapshot.groups]
    assert got == [("MacNodeOffline", 2, ["1", "2"])]
    assert queries.nodes_with_alert("MacNodeOffline") == [1, 2]


def test_only_a_node_of_the_inventory_is_linked(alertmanager):
    """A site's own label (rack-7) and a node deleted while its alert still fires keep
    their hostname but name no node, so no page links to a node that is not there."""
    post(1, "MacNodeOffline", "critical")
    client = Alertmanager.from_settings()
    gone = firing_alerts([(4242, "gpu-gone")], "MacNodeOffline", "critical")
    site = firing_alerts([(1, "rack-7-pdu")], "SitePduHot", "warning")
    site[0]["labels"]["node"] = "rack-7"
    client.post_alerts(gone + site)

    snapshot = queries.firing_alerts()

    nodes = {row["hostname"]: row["node"] for row in snapshot.alerts}
    assert nodes == {"gpu-001": "1", "gpu-gone": "", "rack-7-pdu": ""}
    offline = next(g for g in snapshot.groups if g["alertname"] == "MacNodeOffline")
    assert offline["node_count"] == 2
    assert {n["hostname"]: n["node"] for n in offline["nodes"]} == {"gpu-001": "1", "gpu-gone": ""}
