"""A real Alertmanager per test, configured by MAC from the test's channels."""

from __future__ import annotations

import ipaddress
import shutil
from collections.abc import Iterator

import pytest

from alerting import services
from testkit.alerting import AlertmanagerServer, SmtpSink, WebhookReceiver
from testkit.ports import free_port

needs_alertmanager = pytest.mark.skipif(
    not shutil.which("prometheus-alertmanager") or not shutil.which("amtool"),
    reason="Debian's prometheus-alertmanager (alertmanager and amtool) is not installed",
)


@pytest.fixture(autouse=True)
def receivers_on_loopback(settings):
    """The tests' webhook receivers listen on 127.0.0.1, which channels may not point at
    unless the site allows it (alerting.destinations): these tests allow it."""
    settings.CHANNEL_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.0/8")]


@pytest.fixture
def am_settings(settings, tmp_path):
    """MAC's settings pointed at a private Alertmanager folder and a free port."""
    settings.ALERTMANAGER_DIR = tmp_path / "alertmanager"
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"
    settings.ALERTMANAGER_MANAGED = True
    settings.ALERT_GROUP_WAIT = "0s"
    settings.ALERT_NODE_GROUP_WAIT = "0s"
    settings.ALERT_GROUP_INTERVAL = "1s"
    return settings


@pytest.fixture
def alertmanager(am_settings, tmp_path) -> Iterator[AlertmanagerServer]:
    """Debian's Alertmanager started on the configuration MAC wrote (no channel yet)."""
    services.apply_channels(reload=False)
    port = int(am_settings.ALERTMANAGER_URL.rsplit(":", 1)[1])
    server = AlertmanagerServer(
        services.config_path(), tmp_path / "alertmanager-data", port=port
    ).start()
    yield server
    server.stop()


@pytest.fixture
def webhook() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    sink = SmtpSink()
    yield sink
    sink.close()


@pytest.fixture
def node_alert_hook(alertmanager, webhook):
    """A webhook channel to this test's receiver, loaded into its Alertmanager."""
    from alerting.models import NotificationChannel

    channel = NotificationChannel(name="node alerts hook", kind="webhook", url=webhook.url)
    services.save_channel(channel, actor="test")
    return webhook
