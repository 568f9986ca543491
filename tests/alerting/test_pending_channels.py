"""A channel saved while alertmanager.yml cannot be written: saved, pending, and said so.

The folder is pointed under a plain file, so every write fails with an OSError as on a
full disk (the fault test with a real full tmpfs is tests/macweb/test_bulkhead_faults.py);
this works the same as root, whom permissions would not stop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from django.core.cache import cache

from alerting import bulkheads, services, tasks
from alerting.models import NotificationChannel
from testkit.alerting import AlertmanagerServer
from tests.alerting.conftest import needs_alertmanager

pytestmark = pytest.mark.django_db

URL = "/api/v1/alert-channels/"


@pytest.fixture
def staff_client(api_client, staff):
    api_client.force_authenticate(staff)
    return api_client


@dataclass
class Folder:
    """ALERTMANAGER_DIR as a link that can be pointed under a plain file (no writes)."""

    link: Path
    real: Path
    blocked: Path

    def block(self) -> None:
        self._point(self.blocked)

    def free(self) -> None:
        self._point(self.real)

    def _point(self, target: Path) -> None:
        self.link.unlink()
        self.link.symlink_to(target)


@pytest.fixture
def folder(am_settings, tmp_path) -> Folder:
    (tmp_path / "plain-file").write_text("not a folder")
    found = Folder(tmp_path / "am-link", tmp_path / "am-real", tmp_path / "plain-file" / "am")
    found.real.mkdir()
    found.link.symlink_to(found.real)
    am_settings.ALERTMANAGER_DIR = found.link
    return found


@pytest.fixture
def running_alertmanager(folder, am_settings, tmp_path) -> Iterator[AlertmanagerServer]:
    """Alertmanager reading its file through the link, as it reads MAC_ALERTMANAGER_DIR."""
    services.apply_channels(reload=False)
    port = int(am_settings.ALERTMANAGER_URL.rsplit(":", 1)[1])
    server = AlertmanagerServer(services.config_path(), tmp_path / "am-data", port=port).start()
    yield server
    server.stop()


@needs_alertmanager
def test_the_api_answers_503_with_the_reason_and_the_poll_applies_it_later(
    staff_client, running_alertmanager, folder, webhook, client, staff
):
    folder.block()
    response = staff_client.post(
        URL, {"name": "hook", "kind": "webhook", "url": webhook.url}, format="json"
    )

    assert response.status_code == 503
    detail = response.json()["detail"]
    assert detail.startswith("channel 'hook' (id ") and "saved, but not in use yet" in detail
    assert "alertmanager.yml could not be written" in detail and "MAC_ALERTMANAGER_DIR" in detail
    channel = NotificationChannel.objects.get(name="hook")
    assert "could not be written" in channel.pending_reason
    health = client.get("/health").json()
    assert "alert_config" in health["degraded"]
    assert "1 channel(s) saved but pending" in health["checks"]["alert_config"]["detail"]
    client.force_login(staff)  # the channel's name, to those logged in only
    health = client.get("/health").json()
    assert "channel 'hook' is saved but pending" in health["checks"]["alert_config"]["detail"]

    folder.free()
    result = tasks.sync_alertmanager()  # beat's poll; nothing else was written

    assert result["write_error"] == "" and result["reloaded"] is True
    channel.refresh_from_db()
    assert channel.pending_reason == ""
    loaded = yaml.safe_load(running_alertmanager.get("/api/v2/status")["config"]["original"])
    assert channel.receiver_name in [receiver["name"] for receiver in loaded["receivers"]]
    assert "alert_config" not in client.get("/health").json()["degraded"]


def test_the_admin_warns_naming_the_folder(admin_client, folder):
    folder.block()
    response = admin_client.post(
        "/admin/alerting/notificationchannel/add/",
        {"name": "hook", "kind": "webhook", "url": "http://127.0.0.1:9/hook", "enabled": "on",
         "send_resolved": "on", "smtp_port": "587"},
        follow=True,
    )  # fmt: skip

    page = response.content.decode()
    assert response.status_code == 200
    assert "Saved, but not in use yet: alertmanager.yml could not be written" in page
    assert "MAC_ALERTMANAGER_DIR" in page
    assert NotificationChannel.objects.filter(name="hook").exclude(pending_reason="").exists()


def test_a_file_that_differs_from_the_database_degrades_health(client, am_settings):
    services.apply_channels(reload=False)
    NotificationChannel.objects.create(name="behind-its-back", kind="webhook", url="http://x/")

    body = client.get("/health").json()

    assert "alert_config" in body["degraded"]
    assert "differs from the channels in the database" in body["checks"]["alert_config"]["detail"]


def test_a_reload_past_the_alertmanager_bulkhead_is_left_to_the_poll(am_settings):
    am_settings.BULKHEAD_ALERTMANAGER = 1
    bulkheads.ALERTMANAGER.reset()
    try:
        with bulkheads.ALERTMANAGER.slot():  # another request waits on Alertmanager
            applied = services.save_channel(
                NotificationChannel(name="hook", kind="webhook", url="http://127.0.0.1:9/"),
                actor="t",
            )
    finally:
        bulkheads.ALERTMANAGER.reset()

    assert applied.written and not applied.reloaded
    assert "MAC_BULKHEAD_ALERTMANAGER=1" in applied.reload_error
    assert cache.get(services.RELOAD_PENDING_KEY)  # beat's poll reloads it
