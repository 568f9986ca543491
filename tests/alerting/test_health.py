"""/health with Alertmanager down, or a channel left out: degraded (200), and says why."""

from __future__ import annotations

import time

import pytest

from alerting import services
from alerting.models import NotificationChannel
from testkit.ports import free_port
from tests.alerting.conftest import needs_alertmanager

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def just_started(monkeypatch):
    """A master that started a moment ago: "no sweep yet" is not a failure then, however
    long this test session has run (only the optional checks are under test here)."""
    from healthcheck import health

    monkeypatch.setattr(health, "PROCESS_STARTED", time.time())


def test_alertmanager_down_degrades_health_without_failing_it(client, am_settings):
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert "alertmanager" in body["degraded"] and body["failed"] == []
    detail = body["checks"]["alertmanager"]["detail"]
    assert detail.startswith("alerts unavailable: cannot reach http://127.0.0.1:")


@needs_alertmanager
def test_a_running_alertmanager_and_good_channels_are_ok(client, alertmanager, webhook):
    services.save_channel(
        NotificationChannel(name="hook", kind="webhook", url=webhook.url), actor="t"
    )
    body = client.get("/health").json()
    assert not {"alertmanager", "alert_channels", "alert_config"} & set(body["degraded"])
    assert body["checks"]["alertmanager"]["detail"].startswith("Alertmanager 0.")
    assert body["checks"]["alert_channels"]["detail"] == "1 channel(s) in use"


@needs_alertmanager
def test_a_channel_left_out_is_named_in_health_to_a_logged_in_caller_only(
    client, alertmanager, webhook, django_user_model
):
    channel = NotificationChannel(
        name="broken", kind="webhook", url=webhook.url, matchers=['a=~"("']
    )
    services.save_channel(channel, actor="t")
    anonymous = client.get("/health")
    body = anonymous.json()
    assert body["status"] == "degraded" and "alert_channels" in body["degraded"]
    assert "alert_config" not in body["degraded"]  # the file has what the database has
    assert body["checks"]["alert_channels"]["detail"] == (
        "1 channel(s) left out of alertmanager.yml (log in to see which and why)"
    )
    assert "broken" not in anonymous.content.decode()

    client.force_login(django_user_model.objects.create_user("viewer"))
    named = client.get("/health").json()["checks"]["alert_channels"]["detail"]
    assert "channel 'broken' left out: error parsing regexp" in named


def test_an_api_token_names_the_channels_too(client, am_settings, django_user_model):
    from rest_framework.authtoken.models import Token

    NotificationChannel.objects.create(
        name="ops hook", kind="webhook", url="http://198.51.100.7/hook", config_error="refused"
    )
    token = Token.objects.create(user=django_user_model.objects.create_user("grafana"))
    anonymous = client.get("/health", HTTP_AUTHORIZATION="Token not-a-token")
    assert "ops hook" not in anonymous.content.decode()
    named = client.get("/health", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert (
        "channel 'ops hook' left out: refused" in named.json()["checks"]["alert_channels"]["detail"]
    )


def test_alertmanagers_credentials_never_show(client, am_settings):
    port = free_port()  # nothing listens there
    am_settings.ALERTMANAGER_URL = f"http://mac:am-basic-secret@127.0.0.1:{port}"
    response = client.get("/health")
    assert "am-basic-secret" not in response.content.decode()
    detail = response.json()["checks"]["alertmanager"]["detail"]
    assert f"cannot reach http://127.0.0.1:{port}" in detail
