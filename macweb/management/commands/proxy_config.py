"""`manage.py proxy_config --out FILE --listen HOST:PORT --upstream HOST:PORT`: nginx.conf.

Writes the configuration of the proxy in front of the API server (macweb.nginxconf) from
the master's settings, and makes nginx's own folders under `--prefix` (default: the
folder of FILE). `mac start master` runs it before each start of the `proxy`
service, the Compose master's mac-proxy at each container start; then
`nginx -p PREFIX -c FILE -e stderr` runs it in the foreground.

`--tls-listen HOST:PORT` adds HTTPS (28443) with the material `manage.py prepare_tls`
made or checked just before, and MAC_HTTP says what plain HTTP does then.
`--prometheus HOST:PORT` and `--alertmanager HOST:PORT` serve those servers under
/prometheus/ and /alertmanager/, behind the gate (macweb.monitoring_gate). In scale-out
mode (MAC_SCRAPE_SHARDS) /prometheus/ is the targets view, which serves its own pages;
otherwise the pages people open there lead to Debian's Prometheus's classic UI.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from contract.atomicfile import write_atomically
from macweb.nginxconf import MONITORING_SERVERS, ProxyLimits, TlsServing, render_nginx_conf
from macweb.tls import material_paths


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
            "--tls-listen",
            help="HOST:PORT of HTTPS beside HTTP (e.g. 0.0.0.0:28443); run prepare_tls first",
        )
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
        tls = None
        if options["tls_listen"]:
            tls = _tls(_address("--tls-listen", options["tls_listen"]))
        if tls is None and settings.HTTP_MODE != "on":
            raise CommandError(
                f"MAC_HTTP={settings.HTTP_MODE} needs HTTPS: give --tls-listen HOST:PORT."
            )
        text = render_nginx_conf(
            ProxyLimits.from_settings(settings),
            listen=listen,
            upstream=upstream,
            prefix=str(prefix),
            trusted_proxies=settings.TRUSTED_PROXIES,
            resolver=options["resolver"],
            tls=tls,
            http_mode=settings.HTTP_MODE,
            monitoring=monitoring,
            classic_ui=not settings.SCRAPE_SHARDS,
            https_port=settings.TLS_PORT or None,
        )
        try:
            (prefix / "tmp").mkdir(parents=True, exist_ok=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(out, text.encode())
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc.strerror or exc}") from None
        https = f" and HTTPS on {tls.listen}" if tls else ""
        served = "".join(f", /{name}/ for {address}" for name, address in monitoring.items())
        self.stdout.write(
            f"Wrote {out}: proxy on {listen}{https} for the API server at {upstream}{served}."
        )


def _tls(listen: str) -> TlsServing:
    """The files prepare_tls left (MAC_TLS_DIR, or MAC_TLS_CERT / MAC_TLS_KEY)."""
    paths = material_paths(settings.TLS_DIR, settings.TLS_CERT, settings.TLS_KEY)
    try:
        ca_pem = paths.ca.read_text()
    except OSError as exc:
        raise CommandError(
            f"cannot read {paths.ca} ({exc.strerror or exc}): run `manage.py prepare_tls` "
            "before proxy_config --tls-listen."
        ) from None
    return TlsServing(listen=listen, cert=str(paths.cert), key=str(paths.key), ca_pem=ca_pem)
