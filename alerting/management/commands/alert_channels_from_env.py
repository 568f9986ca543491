"""`manage.py alert_channels_from_env`: the channels MAC_ALERT_WEBHOOK_URL and
MAC_ALERT_EMAIL_TO (with MAC_SMTP_*) describe, for a first install without the admin.

`mac start master` runs it before alertmanager_config. Idempotent: each channel has a
fixed name and is updated in place when the variables change; unset variables touch
nothing (a channel made earlier stays until an admin deletes it).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from alerting import services


class Command(BaseCommand):
    help = "Create or update the notification channels given by MAC_ALERT_* and MAC_SMTP_*."
    # A step of `mac start master`, after its migrate ran Django's system checks.
    requires_system_checks: list[str] = []

    def handle(self, *args, **options):
        try:
            lines = services.channels_from_env()
        except services.ChannelError as exc:
            raise CommandError(
                f"{exc}. Fix the variable (mac env set ...) and start the master again."
            ) from None
        for line in lines or [
            "No MAC_ALERT_WEBHOOK_URL or MAC_ALERT_EMAIL_TO: no channel from the environment."
        ]:
            self.stdout.write(line)
