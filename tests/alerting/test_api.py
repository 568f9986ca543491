"""/api/v1/alert-channels/: model permissions, write-only secrets, a 400 naming the bad field."""

from __future__ import annotations

import pytest

from alerting.models import NotificationChannel
from tests.alerting.conftest import needs_alertmanager

pytestmark = pytest.mark.django_db

URL = "/api/v1/alert-channels/"
SLACK = "https://hooks.slack.example.test/services/T000/B000/very-secret-token"


@pytest.fixture
def staff_client(api_client, staff):
    api_client.force_authenticate(staff)
    return api_client


def test_only_staff_may_see_or_change_channels(auth_client):
    from rest_framework.test import APIClient

    assert APIClient().get(URL).status_code == 401
    assert auth_client.get(URL).status_code == 403
    assert auth_client.post(URL, {"name": "x", "kind": "webhook"}, format="json").status_code == 403


def test_a_secret_url_is_never_returned_and_an_empty_one_keeps_it(staff_client, am_settings):
    created = staff_client.post(
        URL, {"name": "chat", "kind": "slack", "url": SLACK, "severities": ["critical"]},
        format="json",
    )  # fmt: skip
    assert created.status_code == 201, created.json()
    body = created.json()
    assert "url" not in body and "very-secret-token" not in created.content.decode()
    assert body["url_hint"] == "https://hooks.slack.example.test/\u2022\u2022\u2022\u2022"

    changed = staff_client.patch(
        f"{URL}{body['id']}/", {"url": "", "name": "chat ops"}, format="json"
    )

    assert changed.status_code == 200, changed.json()
    channel = NotificationChannel.objects.get()
    assert channel.url == SLACK and channel.name == "chat ops"
    listed = staff_client.get(URL).content.decode()
    assert "very-secret-token" not in listed


def test_the_smtp_password_is_write_only(staff_client, am_settings):
    created = staff_client.post(
        URL,
        {"name": "mail", "kind": "email", "email_to": "ops@example.test",
         "smtp_host": "smtp.example.test", "smtp_from": "mac@example.test", "smtp_user": "mac",
         "smtp_password": "hunter2-long"},
        format="json",
    )  # fmt: skip
    assert created.status_code == 201, created.json()
    assert created.json()["has_smtp_password"] is True
    assert "hunter2" not in created.content.decode()
    pk = created.json()["id"]
    staff_client.patch(f"{URL}{pk}/", {"smtp_password": ""}, format="json")
    assert NotificationChannel.objects.get().smtp_password == "hunter2-long"


HOOK = {"name": "a", "kind": "webhook", "url": "http://x.test/"}
MAIL = {"name": "a", "kind": "email", "email_to": "o@x.test", "smtp_host": "h",
        "smtp_from": "m@x.test"}  # fmt: skip


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**HOOK, "kind": "pager"}, "kind"),
        ({**HOOK, "url": ""}, "url"),
        ({**HOOK, "url": "ftp://x.test/"}, "url"),
        ({**HOOK, "matchers": ["no op"]}, "matchers"),
        ({**HOOK, "matchers": ["severity=critical"]}, "matchers"),
        ({**HOOK, "severities": ["loud"]}, "severities"),
        ({**MAIL, "email_to": ""}, "email_to"),
        ({**MAIL, "email_to": "not-an-address"}, "email_to"),
        ({**MAIL, "smtp_host": ""}, "smtp_host"),
        ({**MAIL, "smtp_port": 70000}, "smtp_port"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(staff_client, body, field):
    response = staff_client.post(URL, body, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not NotificationChannel.objects.exists()


def test_the_test_action_says_why_when_alertmanager_is_down(staff_client, am_settings):
    created = staff_client.post(
        URL, {"name": "hook", "kind": "webhook", "url": "http://127.0.0.1:9/hook"}, format="json"
    )
    response = staff_client.post(f"{URL}{created.json()['id']}/test/")
    assert response.status_code == 409
    assert "cannot reach" in response.json()["detail"]


def test_an_alertmanager_url_that_does_not_speak_http_is_said_not_a_500(staff_client, am_settings):
    """An https port asked with http:// answers no status line: urllib raises
    http.client.BadStatusLine, which is no OSError (it was a 500)."""
    from testkit.fakehttp import NotHttp

    created = staff_client.post(
        URL, {"name": "hook", "kind": "webhook", "url": "http://127.0.0.1:9/hook"}, format="json"
    )
    with NotHttp() as server:
        am_settings.ALERTMANAGER_URL = server.url
        response = staff_client.post(f"{URL}{created.json()['id']}/test/")
    assert response.status_code == 409
    assert "does not speak HTTP (BadStatusLine)" in response.json()["detail"]


@needs_alertmanager
def test_the_test_action_sends_through_alertmanager(staff_client, alertmanager, webhook):
    created = staff_client.post(
        URL, {"name": "hook", "kind": "webhook", "url": webhook.url}, format="json"
    )
    response = staff_client.post(f"{URL}{created.json()['id']}/test/")
    assert response.status_code == 202, response.json()
    assert webhook.wait_for(lambda b: b["commonLabels"]["alertname"] == "MacTestNotification", 20)


def test_maintenance_through_the_api_is_staff_only_and_checked(
    api_client, auth_client, staff, make_node
):
    node = make_node("gpu-21", "10.1.0.21")
    url = f"/api/v1/nodes/{node.pk}/maintenance"
    assert auth_client.put(url, {"maintenance": True}, format="json").status_code == 403
    api_client.force_authenticate(staff)
    bad = api_client.put(url, {"maintenance": "perhaps"}, format="json")
    assert bad.status_code == 400 and "maintenance" in bad.json()
    # Only JSON's true and false: DRF's own field took these as true.
    for loose in ("yes", "on", "true", 1, None):
        bad = api_client.put(url, {"maintenance": loose}, format="json")
        assert bad.status_code == 400 and "maintenance" in bad.json(), loose
    node.refresh_from_db()
    assert node.maintenance is False
    assert (
        api_client.put(
            "/api/v1/nodes/999999/maintenance", {"maintenance": True}, format="json"
        ).status_code
        == 404
    )
    done = api_client.put(url, {"maintenance": True}, format="json")
    assert done.status_code == 200 and done.json()["changed"] is True
    node.refresh_from_db()
    assert node.maintenance is True


def test_maintenance_for_a_node_deleted_during_the_request_is_a_404(
    api_client, staff, make_node, monkeypatch
):
    from inventory import services

    node = make_node("gpu-22", "10.1.0.22")
    switch = services.set_maintenance

    def deleted_first(target, on, **kwargs):
        # An admin deletes the node between the view's lookup and the switch.
        services.remove_node(target, actor="admin:other", message="deleted in the admin")
        return switch(target, on, **kwargs)

    monkeypatch.setattr(services, "set_maintenance", deleted_first)
    api_client.force_authenticate(staff)

    response = api_client.put(
        f"/api/v1/nodes/{node.pk}/maintenance", {"maintenance": True}, format="json"
    )

    assert response.status_code == 404, response.json()
    assert "detail" in response.json()


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.slack.example.test:99999/services/T0/B0/token",  # Django's check passes it
        "https://hooks.slack.example.test:0/services/T0/B0/token",
        # Go quotes a URL it refuses with %q: these would come back escaped, past scrub()
        'https://hooks.example.test/services/T0/B0/se"cretTOKEN',
        "https://hooks.example.test/services/T0/B0/se\\cretTOKEN",
        "https://hooks.example.test/services/T0/B0/se\x01cretTOKEN",
    ],
)
def test_a_url_alertmanager_cannot_use_is_a_400_naming_url(staff_client, am_settings, url):
    for kind in ("webhook", "slack"):
        response = staff_client.post(URL, {"name": "a", "kind": kind, "url": url}, format="json")
        assert response.status_code == 400, response.content
        assert "url" in response.json(), response.json()
        assert "cretTOKEN" not in response.content.decode()
    assert not NotificationChannel.objects.exists()


BAD_PORT = "https://hooks.slack.example.test:99999/services/T0/B0/stored-token"


def test_a_stored_url_with_a_bad_port_takes_no_other_channel_down(staff_client, am_settings):
    """A row saved before the check existed: listed with a hint, left out of the file, and
    every other channel still saved and written."""
    from alerting import services

    stored = NotificationChannel.objects.create(name="old", kind="slack", url=BAD_PORT)

    listed = staff_client.get(URL)
    assert listed.status_code == 200, listed.content[:500]
    [row] = listed.json()["results"]
    assert row["url_hint"] == "https://hooks.slack.example.test:99999/\u2022\u2022\u2022\u2022"
    assert "stored-token" not in listed.content.decode()

    created = staff_client.post(
        URL, {"name": "other", "kind": "webhook", "url": "http://198.51.100.7/hook"},
        format="json",
    )  # fmt: skip
    assert created.status_code == 201, created.content[:500]
    changed = staff_client.patch(
        f"{URL}{created.json()['id']}/", {"severities": ["critical"]}, format="json"
    )
    assert changed.status_code == 200, changed.content[:500]

    text = services.config_path().read_text()
    assert f"mac-channel-{created.json()['id']}" in text
    assert stored.receiver_name not in text and "stored-token" not in text
    stored.refresh_from_db()
    assert stored.config_error.startswith("url: ") and "65535" in stored.config_error
    assert "stored-token" not in stored.config_error
