"""`manage.py prepare_tls [--name HOST ...]`: the TLS material of the master's front door.

Makes the master's CA on its first start and a server certificate for the given names
(plus MAC_TLS_NAMES and loopback), or checks the site's MAC_TLS_CERT / MAC_TLS_KEY
(macweb.tls). Runs before each start of the proxy, then `proxy_config --tls-listen`.
Its last line is the pin agents are given (`--pin-only` prints nothing else), which
`mac start master` puts in the join line.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from macweb.tls import TlsError, prepare


class Command(BaseCommand):
    help = "Make (first start) or check the master's CA and server certificate; print the pin."
    # Runs in the Compose proxy too, which has no database and no data folder.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument(
            "--name",
            action="append",
            default=[],
            help="host names or addresses agents reach the master by (repeatable, or "
            "comma-separated)",
        )
        parser.add_argument("--pin-only", action="store_true", help="print only the pin")

    def handle(self, *args, **options) -> None:
        given = [name for value in options["name"] for name in value.split(",")]
        names = [*given, *settings.TLS_NAMES]
        try:
            material = prepare(
                settings.TLS_DIR,
                names,
                site_cert=settings.TLS_CERT,
                site_key=settings.TLS_KEY,
                cluster=settings.CLUSTER_NAME,
            )
        except TlsError as exc:
            raise CommandError(str(exc)) from None
        if not options["pin_only"]:
            for made in material.made:
                self.stdout.write(f"TLS: {made}.")
            self.stdout.write(f"TLS: serving {material.cert}; agents fetch {material.ca}.")
        self.stdout.write(f"MAC_MASTER_CA_SHA256={material.pin}")
