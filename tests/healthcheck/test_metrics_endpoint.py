"""The master's /metrics: per-node status from the inventory, sweep figures from Redis."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from alerting.nodealerts import down_since
from healthcheck.state import SweepStats, record_sweep
from inventory.choices import Diagnosis, NodeStatus, StatusReason
from testkit.ports import free_port

pytestmark = pytest.mark.django_db


def samples(response) -> dict:
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_offline_nodes_stay_visible_with_their_reason(client, make_node, sweep_redis):
    up = make_node("gpu-01", "10.1.0.1", status=NodeStatus.ONLINE, status_reason=StatusReason.OK)
    down = make_node(
        "gpu-02",
        "10.1.0.2",
        status=NodeStatus.OFFLINE,
        status_reason=StatusReason.TIMEOUT,
        diagnosis=Diagnosis.IP_FORWARD_OFF,
        maintenance=True,
        gpu_vendor="amd",
    )

    response = client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    got = samples(response)
    # down_since is empty while Online, which Prometheus reads as no label: one series.
    base = {"gpu_vendor": "none", "maintenance": "false", "cluster_name": "mac", "down_since": ""}
    key = tuple(sorted({"node": str(up.pk), "hostname": "gpu-01", **base}.items()))
    assert got[("mac_node_up", key)] == 1.0
    labels = {
        "node": str(down.pk),
        "hostname": "gpu-02",
        "cluster_name": "mac",
        "gpu_vendor": "amd",
        "maintenance": "true",
        # The incident's start, as the master's own alert names it (alerting.nodealerts).
        "down_since": down_since(down.status_changed_at),
    }
    assert got[("mac_node_up", tuple(sorted(labels.items())))] == 0.0
    status_labels = {
        "node": str(down.pk),
        "hostname": "gpu-02",
        "cluster_name": "mac",
        "status": "offline",
        "reason": "timeout",
        "diagnosis": "ip_forward_off",
        "maintenance": "true",
    }
    assert got[("mac_node_status", tuple(sorted(status_labels.items())))] == 1.0
    assert got[("mac_nodes", (("status", "offline"),))] == 1.0
    assert got[("mac_nodes", (("status", "unknown"),))] == 0.0


def test_each_probed_exporter_has_its_own_up_series(client, make_node, sweep_redis):
    # ip_forward=0: Offline, but the host-network nic-exporter answers (and is scraped).
    down = make_node(
        "gpu-03",
        "10.1.0.3",
        status=NodeStatus.OFFLINE,
        status_reason=StatusReason.TIMEOUT,
        diagnosis=Diagnosis.IP_FORWARD_OFF,
        exporter_health={"sys-exporter": False, "nic-exporter": True, "dcgm-exporter": False},
    )
    make_node("gpu-04", "10.1.0.4")  # registered, not probed yet: no exporter series

    got = samples(client.get("/metrics"))

    def exporter_up(service: str) -> float:
        labels = {"node": str(down.pk), "hostname": "gpu-03", "service": service}
        return got[("mac_node_exporter_up", tuple(sorted(labels.items())))]

    assert exporter_up("nic-exporter") == 1.0
    assert exporter_up("sys-exporter") == 0.0
    assert exporter_up("dcgm-exporter") == 0.0
    series = [labels for name, labels in got if name == "mac_node_exporter_up"]
    assert len(series) == 3


def test_sweep_figures_are_exported(client, sweep_redis):
    stats = SweepStats(started_at=1000.0, finished_at=1002.5, duration=2.5, probe_duration=2.1)
    stats.outcomes = {"ok": 18, "timeout": 2}
    record_sweep(sweep_redis, stats)
    record_sweep(sweep_redis, stats)

    got = samples(client.get("/metrics"))

    assert got[("mac_sweep_duration_seconds", ())] == 2.5
    assert got[("mac_sweep_last_timestamp_seconds", ())] == 1002.5
    assert got[("mac_probes_total", (("outcome", "ok"),))] == 36
    assert got[("mac_probes_total", (("outcome", "timeout"),))] == 4
    assert got[("mac_sweeps_total", ())] == 2
    assert got[("mac_sweep_targets_written", ())] == 1.0


def test_what_the_masters_own_alert_rules_need_is_exported(client, sweep_redis, settings):
    settings.PROBE_INTERVAL = 7.0
    stats = SweepStats(started_at=1000.0, finished_at=1002.5, duration=2.5)
    stats.targets_error = "cannot write /var/lib/mac/targets: No space left on device"
    record_sweep(sweep_redis, stats)

    got = samples(client.get("/metrics"))

    assert got[("mac_probe_interval_seconds", ())] == 7.0
    assert got[("mac_sweep_targets_written", ())] == 0.0


def test_a_node_not_probed_yet_is_not_down(client, make_node):
    """Unknown (registered, first probe to come): no mac_node_up, so MacNodeOffline's
    backstop cannot page for a node that joined while a long sweep runs."""
    fresh = make_node("gpu-10", "10.1.0.10")
    assert fresh.status == NodeStatus.UNKNOWN
    got = samples(client.get("/metrics"))
    assert not [labels for name, labels in got if name == "mac_node_up"]
    assert got[("mac_nodes", (("status", "unknown"),))] == 1.0
    status = dict(next(labels for name, labels in got if name == "mac_node_status"))
    assert (status["hostname"], status["status"], status["reason"]) == (
        "gpu-10",
        "unknown",
        "registered",
    )

    fresh.status, fresh.status_reason = NodeStatus.OFFLINE, StatusReason.TIMEOUT
    fresh.save()
    got = samples(client.get("/metrics"))
    assert [value for (name, _), value in got.items() if name == "mac_node_up"] == [0.0]


def test_without_redis_the_node_series_still_come_out(client, make_node, settings):
    make_node("gpu-09", "10.1.0.9", status=NodeStatus.ONLINE)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    got = samples(client.get("/metrics"))
    assert any(name == "mac_node_up" for name, _ in got)
    assert not any(name == "mac_sweep_duration_seconds" for name, _ in got)


def test_posts_of_the_node_alerts_are_counted_by_outcome(client, sweep_redis):
    from alerting.nodealerts import Post, record

    record(Post(firing=[1]))
    record(Post(error="cannot reach http://127.0.0.1:29093: Connection refused"))
    got = samples(client.get("/metrics"))
    posts = {
        dict(labels)["outcome"]: value
        for (name, labels), value in got.items()
        if name == "mac_alert_posts_total"
    }
    assert posts["ok"] >= 1 and posts["failed"] >= 1
    assert not any(name == "mac_diagnosis_info" for name, _labels in got)


def test_nodes_are_counted_by_gpu_verdict_and_by_the_action_they_need(
    client, make_node, sweep_redis
):
    make_node(health_state="unhealthy", health_action="reboot")
    make_node(health_state="unhealthy", health_action="inspect_hardware")
    make_node(health_state="degraded", health_action="none")
    make_node(health_state="healthy", health_action="restart_app")

    got = samples(client.get("/metrics"))

    assert got[("mac_nodes_health", (("state", "unhealthy"),))] == 2
    assert got[("mac_nodes_health", (("state", "degraded"),))] == 1
    assert got[("mac_nodes_health", (("state", "healthy"),))] == 1
    assert got[("mac_nodes_needing_action", (("action", "reboot"),))] == 1
    assert got[("mac_nodes_needing_action", (("action", "inspect_hardware"),))] == 1
    assert got[("mac_nodes_needing_action", (("action", "reset_gpu"),))] == 0
