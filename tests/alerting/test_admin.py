"""The admin's channel form: secrets never rendered back, kept when left empty, tests sent."""

from __future__ import annotations

import pytest

from alerting.models import NotificationChannel
from tests.alerting.conftest import needs_alertmanager

pytestmark = pytest.mark.django_db

SECRET = "https://hooks.example.test/T0/B0/admin-secret-token"
ADD = "/admin/alerting/notificationchannel/add/"


def form(**fields) -> dict:
    data = {
        "name": "hook", "kind": "webhook", "enabled": "on", "send_resolved": "on", "url": "",
        "matchers": "", "email_to": "", "smtp_host": "", "smtp_port": "587", "smtp_user": "",
        "smtp_password": "", "smtp_from": "", "smtp_require_tls": "on",
    }  # fmt: skip
    data.update(fields)
    return {key: value for key, value in data.items() if value is not None}


@pytest.fixture
def admin_client(client, staff):
    client.force_login(staff)
    return client


def test_the_url_is_write_only_and_an_empty_field_keeps_it(admin_client, am_settings):
    response = admin_client.post(ADD, form(url=SECRET, matchers='cluster_name="prod"'))
    assert response.status_code == 302, response.content.decode()[:2000]
    channel = NotificationChannel.objects.get()
    assert channel.matchers == ['cluster_name="prod"']
    change = f"/admin/alerting/notificationchannel/{channel.pk}/change/"

    page = admin_client.get(change).content.decode()
    assert "admin-secret-token" not in page
    assert "https://hooks.example.test/" in page  # the hint: scheme and host only

    admin_client.post(change, form(name="hook two", url=""))
    channel.refresh_from_db()
    assert channel.url == SECRET and channel.name == "hook two"
    assert (
        "admin-secret-token"
        not in admin_client.get("/admin/alerting/notificationchannel/").content.decode()
    )


def test_a_bad_field_is_shown_on_the_form_and_nothing_saved(admin_client, am_settings):
    response = admin_client.post(ADD, form(url="http://x.test/", matchers="rack is a1"))
    assert response.status_code == 200
    assert "is not a matcher" in response.content.decode()
    assert not NotificationChannel.objects.exists()


def test_the_admin_says_when_alertmanager_could_not_be_reloaded(admin_client, am_settings):
    response = admin_client.post(ADD, form(url="http://127.0.0.1:9/hook"), follow=True)
    assert "Alertmanager not reloaded" in response.content.decode()


@needs_alertmanager
def test_send_a_test_notification_action(admin_client, alertmanager, webhook):
    admin_client.post(ADD, form(url=webhook.url))
    channel = NotificationChannel.objects.get()
    response = admin_client.post(
        "/admin/alerting/notificationchannel/",
        {"action": "send_test_notification", "_selected_action": [channel.pk]},
        follow=True,
    )
    assert "Test alert sent through Alertmanager to hook" in response.content.decode()
    assert webhook.wait_for(lambda b: b["receiver"] == channel.receiver_name, 20)


def test_a_stored_url_with_a_bad_port_still_lists_and_opens(admin_client, am_settings):
    stored = NotificationChannel.objects.create(
        name="old", kind="slack", url="https://hooks.example.test:99999/T0/B0/port-token"
    )
    listed = admin_client.get("/admin/alerting/notificationchannel/")
    assert listed.status_code == 200
    assert "https://hooks.example.test:99999/" in listed.content.decode()
    page = admin_client.get(f"/admin/alerting/notificationchannel/{stored.pk}/change/")
    assert page.status_code == 200
    assert "port-token" not in page.content.decode()
    # Saved again as it is: the form names the field instead of saving it.
    again = admin_client.post(
        f"/admin/alerting/notificationchannel/{stored.pk}/change/", form(name="old", kind="slack")
    )
    assert again.status_code == 200 and "between 1 and 65535" in again.content.decode()
