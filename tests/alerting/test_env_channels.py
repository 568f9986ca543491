"""MAC_ALERT_WEBHOOK_URL / MAC_ALERT_EMAIL_TO make channels at start, idempotently."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from alerting.models import NotificationChannel

pytestmark = pytest.mark.django_db


def run(**options) -> str:
    from io import StringIO

    out = StringIO()
    call_command("alert_channels_from_env", stdout=out)
    return out.getvalue()


def test_both_variables_make_one_channel_each_and_a_rerun_changes_nothing(settings):
    settings.ALERT_WEBHOOK_URL = "http://hooks.example.test/mac"
    settings.ALERT_EMAIL_TO = "ops@example.test, oncall@example.test"
    settings.SMTP_HOST, settings.SMTP_PORT = "smtp.example.test", 2525
    settings.SMTP_FROM, settings.SMTP_USER, settings.SMTP_PASSWORD = "mac@example.test", "mac", "pw"
    settings.SMTP_TLS = False

    first = run()
    assert "Created the channel 'webhook (MAC_ALERT_WEBHOOK_URL)'." in first
    assert "Created the channel 'email (MAC_ALERT_EMAIL_TO)'." in first
    mail = NotificationChannel.objects.get(kind="email")
    assert mail.email_addresses() == ["ops@example.test", "oncall@example.test"]
    assert (mail.smtp_port, mail.smtp_require_tls, mail.created_by) == (2525, False, "env")

    assert "is up to date" in run() and NotificationChannel.objects.count() == 2

    settings.ALERT_WEBHOOK_URL = "http://hooks.example.test/other"
    assert "Updated the channel 'webhook (MAC_ALERT_WEBHOOK_URL)'." in run()
    assert NotificationChannel.objects.get(kind="webhook").url.endswith("/other")


def test_without_the_variables_nothing_is_made(settings):
    settings.ALERT_WEBHOOK_URL = settings.ALERT_EMAIL_TO = ""
    assert "no channel from the environment" in run()
    assert not NotificationChannel.objects.exists()


def test_a_bad_value_names_the_variable(settings):
    settings.ALERT_WEBHOOK_URL = ""
    settings.ALERT_EMAIL_TO = "ops@example.test"
    settings.SMTP_HOST, settings.SMTP_FROM = "", "mac@example.test"
    with pytest.raises(CommandError, match="MAC_SMTP_HOST: the SMTP server is required"):
        run()
    assert not NotificationChannel.objects.exists()
