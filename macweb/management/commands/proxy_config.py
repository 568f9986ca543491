"""`manage.py proxy_config --out FILE --listen HOST:PORT --upstream HOST:PORT`: nginx.conf.

Writes the configuration of the proxy in front of the API server (macweb.proxy) from
the master's settings, and makes nginx's own folders under `--prefix` (default: the
folder of FILE). `mac start master` runs it before each start of the `proxy`
service, the Compose master's mac-proxy at each container start; then
`nginx -p PREFIX -c FILE -e stderr` runs it in the foreground.

`--prometheus HOST:PORT` and `--alertmanager HOST:PORT` serve those servers under
/prometheus/ and /alertmanager/, behind the gate (macweb.monitoring_gate).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from contract.atomicfile import write_atomically
from macweb.proxy import MONITORING_SERVERS, ProxyLimits, render_nginx_conf


def _address(option: str, value: str) -> str:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise CommandError(f"{option} {value!r} is not HOST:PORT (e.g. 127.0.0.1:28081).")
    return value


class Command(BaseCommand):
    help = "Write nginx.conf for the proxy in front of the API server (MAC_API_* limits)."
    # Runs before the master is prepared (the Compose proxy has no data folder at all).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--out", required=True, help="file to write, e.g. var/proxy/nginx.conf")
        parser.add_argument("--listen", required=True, help="HOST:PORT clients connect to")
        parser.add_argument("--upstream", required=True, help="HOST:PORT of the API server")
        parser.add_argument("--prefix", help="nginx's folder: pid file, temporary folders")
        parser.add_argument(
            "--resolver",
            default="",
            help="DNS server that nginx asks for the upstream's name as it goes "
            "(127.0.0.11 under Docker)",
        )
        for name in MONITORING_SERVERS:
            parser.add_argument(
                f"--{name}",
                default="",
                help=f"HOST:PORT of {name.capitalize()}, served under /{name}/ to those "
                "who may see it",
            )

    def handle(self, *args, **options) -> None:
        listen = _address("--listen", options["listen"])
        upstream = _address("--upstream", options["upstream"])
        monitoring = {
            name: _address(f"--{name}", options[name])
            for name in MONITORING_SERVERS
            if options[name]
        }
        out = Path(options["out"]).resolve()
        prefix = Path(options["prefix"]).resolve() if options["prefix"] else out.parent
        text = render_nginx_conf(
            ProxyLimits.from_settings(settings),
            listen=listen,
            upstream=upstream,
            prefix=str(prefix),
            trusted_proxies=settings.TRUSTED_PROXIES,
            resolver=options["resolver"],
            monitoring=monitoring,
        )
        try:
            (prefix / "tmp").mkdir(parents=True, exist_ok=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(out, text.encode())
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc.strerror or exc}") from None
        served = "".join(f", /{name}/ for {address}" for name, address in monitoring.items())
        self.stdout.write(
            f"Wrote {out}: proxy on {listen} for the API server at {upstream}{served}."
        )
