"""Beat's poll: firing alerts pushed to the dashboards when they change, Alertmanager or not."""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.cache import cache

from alerting import tasks
from alerting.client import Alertmanager
from inventory import live
from macweb.celery import app
from testkit.channel_layer import receive_within
from tests.alerting.conftest import needs_alertmanager

pytestmark = pytest.mark.django_db


@pytest.fixture
def dashboard():
    """A channel in the dashboards' group, as an open page's consumer is."""
    layer = get_channel_layer()
    name = async_to_sync(layer.new_channel)()
    async_to_sync(live.join_dashboard)(layer, name)
    cache.delete(tasks.SNAPSHOT_KEY)

    def receive() -> dict:
        async def one() -> dict:
            return await receive_within(layer, name, 10)

        return async_to_sync(one)()

    yield receive
    async_to_sync(live.leave_dashboard)(layer, name)


def test_the_poll_is_scheduled_below_its_interval():
    entry = app.conf.beat_schedule["sync-alertmanager"]
    assert entry["task"] == "alerting.tasks.sync_alertmanager"
    assert 0 < entry["options"]["expires"] < entry["schedule"]


def test_alertmanager_down_is_pushed_once_with_the_reason(am_settings, dashboard):
    first = tasks.sync_alertmanager()
    message = dashboard()
    assert message["type"] == "alerts.changed"
    assert message["alerts"]["available"] is False
    assert "cannot reach" in message["alerts"]["error"]
    assert first["pushed"] is True
    assert tasks.sync_alertmanager()["pushed"] is False  # nothing new, nothing sent


@needs_alertmanager
def test_a_new_firing_alert_is_pushed(alertmanager, dashboard, make_node):
    tasks.sync_alertmanager()
    assert dashboard()["alerts"] == {
        "available": True, "error": "", "count": 0, "alerts": [], "groups": [],
    }  # fmt: skip
    make_node("gpu-05", "10.0.0.5", pk=5)
    Alertmanager.from_settings().post_alerts(
        [
            {
                "labels": {
                    "alertname": "MacNodeOffline",
                    "severity": "critical",
                    "node": "5",
                    "hostname": "gpu-05",
                    "cluster_name": "mac",
                },
                "annotations": {"summary": "Node gpu-05 is offline"},
                "startsAt": dt.datetime.now(dt.UTC).isoformat(),
            }
        ]
    )

    assert tasks.sync_alertmanager()["pushed"] is True
    snapshot = dashboard()["alerts"]
    while not snapshot["count"]:  # an earlier snapshot may still be queued; pages keep the last
        snapshot = dashboard()["alerts"]
    assert snapshot["count"] == 1
    [row] = snapshot["alerts"]
    assert (row["alertname"], row["hostname"], row["node"], row["severity"]) == (
        "MacNodeOffline", "gpu-05", "5", "critical",
    )  # fmt: skip
    [group] = snapshot["groups"]  # what the fleet page shows
    assert (group["alertname"], group["count"], group["nodes"][0]["hostname"]) == (
        "MacNodeOffline", 1, "gpu-05",
    )  # fmt: skip


@needs_alertmanager
def test_the_poll_puts_back_a_missing_maintenance_silence(alertmanager, make_node):
    node = make_node("gpu-06", "10.1.0.6", maintenance=True)
    result = tasks.sync_alertmanager()
    assert result["silences_created"] == [node.pk]
    assert tasks.sync_alertmanager()["silences_created"] == []


@needs_alertmanager
def test_a_stored_channel_with_a_bad_port_never_stops_the_silences(alertmanager, make_node):
    from alerting import services
    from alerting.models import NotificationChannel

    bad = NotificationChannel.objects.create(
        name="old", kind="slack", url="https://hooks.example.test:99999/T0/B0/port-token"
    )
    node = make_node("gpu-06", "10.1.0.6", maintenance=True)

    result = tasks.sync_alertmanager()

    assert result["silences_created"] == [node.pk]
    assert result["write_error"] == ""
    bad.refresh_from_db()
    assert "65535" in bad.config_error
    assert bad.receiver_name not in services.config_path().read_text()


@needs_alertmanager
def test_a_failed_rewrite_of_the_configuration_still_reconciles_silences(
    alertmanager, make_node, monkeypatch
):
    from alerting import services

    node = make_node("gpu-06", "10.1.0.6", maintenance=True)
    monkeypatch.setattr(services, "config_out_of_step", lambda: "differs")

    def broken(**kwargs):
        raise RuntimeError("a bug in the generation")

    monkeypatch.setattr(services, "apply_channels", broken)

    result = tasks.sync_alertmanager()

    assert result["silences_created"] == [node.pk]
    assert "a bug in the generation" in result["apply_error"]
