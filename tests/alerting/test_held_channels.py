"""Channels cannot reach inside the master later either (issue 31).

A channel's name is looked up again at every generation of alertmanager.yml, which
beat's poll runs whenever a channel in use now resolves elsewhere: one that now
resolves inside the master (or not at all) is held back, pending with the reason, left
out of what the real Alertmanager loads, and /health says so; it comes back once its
name resolves outside again. And Alertmanager never follows a redirect: a receiver
answering 307 to the master's loopback reaches nothing there.

The site's DNS is the tests' own (tests/alerting/conftest.py SiteDns, at the one lookup
of alerting.destinations); everything else is real: the generation, amtool
check-config, Debian's Alertmanager, the HTTP servers.
"""

from __future__ import annotations

import time

import pytest
import yaml

from alerting import services, tasks
from alerting.models import NotificationChannel
from testkit.alerting import RedirectingReceiver, WebhookReceiver
from tests.alerting.conftest import needs_alertmanager

pytestmark = [pytest.mark.django_db, needs_alertmanager]

HOOK = "http://hooks.example.test:8080/mac"


@pytest.fixture
def no_allowlist(settings):
    settings.CHANNEL_ALLOWED_NETWORKS = []
    return settings


@pytest.fixture
def just_started(monkeypatch):
    from healthcheck import health

    monkeypatch.setattr(health, "PROCESS_STARTED", time.time())


def loaded(alertmanager) -> dict:
    return yaml.safe_load(alertmanager.get("/api/v2/status")["config"]["original"])


def receiver_names(alertmanager) -> list[str]:
    return [receiver["name"] for receiver in loaded(alertmanager)["receivers"]]


def test_a_name_that_now_resolves_to_loopback_is_held_back_at_the_next_generation(
    alertmanager, no_allowlist, site_dns, client, staff, just_started
):
    channel = NotificationChannel(name="ops hook", kind="webhook", url=HOOK)
    services.save_channel(channel, actor="test")
    assert channel.receiver_name in receiver_names(alertmanager)

    site_dns.point("hooks.example.test", "127.0.0.1")  # re-pointed after it was saved
    polled = tasks.sync_alertmanager()  # beat's poll: the real generation, amtool, reload

    assert polled["reloaded"] is True, polled
    channel.refresh_from_db()
    assert channel.pending_reason.startswith(
        "hooks.example.test (now resolves to 127.0.0.1) is a loopback address"
    ), channel.pending_reason
    assert channel.config_error == ""  # nothing wrong with the channel as written
    assert channel.receiver_name not in receiver_names(alertmanager)
    anonymous = client.get("/health").json()
    assert "alert_config" in anonymous["degraded"]
    assert anonymous["checks"]["alert_config"]["detail"].startswith(
        "1 channel(s) saved but pending"
    )
    assert "ops hook" not in str(anonymous)
    client.force_login(staff)
    named = client.get("/health").json()["checks"]["alert_config"]["detail"]
    assert "channel 'ops hook' is saved but pending: hooks.example.test (now resolves" in named
    with pytest.raises(services.ChannelError, match="held back"):
        services.send_test_notification(channel, actor="test")

    site_dns.point("hooks.example.test", "192.0.2.10")  # outside again
    tasks.sync_alertmanager()

    channel.refresh_from_db()
    assert channel.pending_reason == ""
    assert channel.receiver_name in receiver_names(alertmanager)
    assert "alert_config" not in client.get("/health").json()["degraded"]


def test_a_name_that_stops_resolving_is_held_back_too(alertmanager, no_allowlist, site_dns):
    channel = NotificationChannel(name="ops hook", kind="webhook", url=HOOK)
    services.save_channel(channel, actor="test")

    del site_dns.names["hooks.example.test"]
    tasks.sync_alertmanager()

    channel.refresh_from_db()
    assert channel.pending_reason.startswith("hooks.example.test does not resolve any more")
    assert channel.receiver_name not in receiver_names(alertmanager)


def test_an_email_channel_whose_server_moves_inside_is_held_back(
    alertmanager, no_allowlist, site_dns
):
    channel = NotificationChannel(
        name="ops mail", kind="email", email_to="ops@example.test",
        smtp_host="smtp.example.test", smtp_port=25, smtp_from="mac@example.test",
    )  # fmt: skip
    services.save_channel(channel, actor="test")
    assert channel.receiver_name in receiver_names(alertmanager)

    site_dns.point("smtp.example.test", "169.254.169.254")
    tasks.sync_alertmanager()

    channel.refresh_from_db()
    assert "is a cloud metadata address" in channel.pending_reason
    assert channel.receiver_name not in receiver_names(alertmanager)


def test_every_http_receiver_refuses_redirects_and_amtool_takes_the_file(alertmanager, webhook):
    for kind in ("webhook", "slack"):
        services.save_channel(
            NotificationChannel(name=kind, kind=kind, url=webhook.url), actor="test"
        )

    config = loaded(alertmanager)
    http = [
        entry["http_config"]
        for receiver in config["receivers"]
        for key in ("webhook_configs", "slack_configs")
        for entry in receiver.get(key, [])
    ]
    assert len(http) == 2 and all(h["follow_redirects"] is False for h in http), http


def test_a_redirecting_webhook_is_not_followed(alertmanager):
    inside = WebhookReceiver()  # stands for what only the master reaches
    redirector = RedirectingReceiver(location=inside.url, status=307)
    try:
        channel = NotificationChannel(name="redirects", kind="webhook", url=redirector.url)
        services.save_channel(channel, actor="test")
        services.send_test_notification(channel, actor="test")
        # A second attempt means the first one ended: Alertmanager took the 307 as a
        # failure and retries, rather than posting where the redirect pointed.
        assert redirector.wait_for_posts(2, timeout=60), redirector.posts
    finally:
        redirector.close()
        inside.close()

    assert inside.notifications == []
