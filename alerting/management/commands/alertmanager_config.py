"""`manage.py alertmanager_config`: write alertmanager.yml and mac.tmpl from the channels.

`mac start master` runs it before Alertmanager starts (and the Compose api-server at
every start), so Alertmanager always boots with the channels of the admin. `--reload`
also asks a running Alertmanager to reread it. Channels Alertmanager would refuse are
left out and named, with the reason; the rest still work.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from alerting import services
from alerting.models import NotificationChannel
from contract.redact import url_without_credentials


class Command(BaseCommand):
    help = (
        "Write Alertmanager's configuration (MAC_ALERTMANAGER_DIR) from the notification channels."
    )
    # A step of `mac start master`, after its migrate ran Django's system checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument(
            "--reload", action="store_true", help="then POST /-/reload to MAC_ALERTMANAGER_URL"
        )

    def handle(self, *args, **options):
        if not settings.ALERTMANAGER_MANAGED:
            where = url_without_credentials(settings.ALERTMANAGER_URL)
            self.stdout.write(
                f"MAC_ALERTMANAGER_MANAGED=0: the Alertmanager at {where} keeps its own "
                "configuration; nothing written."
            )
            return
        try:
            applied = services.apply_channels(reload=options["reload"])
        except OSError as exc:
            raise CommandError(
                f"cannot write {services.config_path()}: {exc.strerror or exc}. Make "
                "MAC_ALERTMANAGER_DIR writable for this user, or point it elsewhere."
            ) from None
        if applied.config_error:
            raise CommandError(
                f"Alertmanager would refuse the configuration: {applied.config_error}"
            )
        path = services.config_path()
        names = dict(NotificationChannel.objects.values_list("pk", "name"))
        state = "Wrote" if applied.written else "Kept (unchanged)"
        used = ", ".join(repr(names[pk]) for pk in applied.included) or "none"
        self.stdout.write(f"{state} {path}: channels in use: {used}.")
        for pk, error in applied.left_out.items():
            self.stdout.write(
                f"Left out {names.get(pk, pk)!r}: {error}. Fix it in the admin (Alerts > "
                "Notification channels); the other channels work meanwhile."
            )
        if applied.reload_error:
            raise CommandError(f"Alertmanager was not reloaded: {applied.reload_error}")
        if applied.reloaded:
            self.stdout.write(
                f"Reloaded Alertmanager at {url_without_credentials(settings.ALERTMANAGER_URL)}."
            )
