"""`manage.py prometheus_config --out FILE`: write the Prometheus config for this master.

`--shard K --of N` writes the config of one of N Prometheus servers that share the
fleet through the master's http_sd endpoint (scraping.httpsd); run it once per
server, K = 0..N-1.

Alerts go to MAC_ALERTMANAGER_URL (`--alertmanager`). With MAC_ALERT_FOR or
MAC_RUNBOOK_BASE_URL set, the rules Prometheus loads are a copy rendered beside the
config (`rules/alerts.yml`), not the shipped file.

MAC_METRICS_TOKEN goes into a 0600 file beside the config, which Prometheus sends as
its bearer token (none while the token is unset).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from contract.atomicfile import write_atomically
from contract.settings import valid_duration
from scraping.httpsd import ShardError, parse_shard
from scraping.promconfig import (
    ALERT_RULES,
    LOCAL_MASTER,
    HttpSd,
    RulesError,
    alertmanager_config,
    parse_rule_for,
    render_alert_rules,
    render_prometheus_yaml,
    seconds_as_duration,
    shipped_rule_names,
)
from scraping.targets import ensure_target_files


class Command(BaseCommand):
    help = (
        "Write a Prometheus configuration that scrapes the exporters listed in the sweep's "
        "file-SD targets (MAC_SD_DIR) and the master's own /metrics."
    )
    # A step of `mac start master`, after its migrate ran Django's system checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--out", help="file to write (e.g. var/prometheus.yml); required")
        parser.add_argument("--sd-dir", help="directory of the targets files (default: MAC_SD_DIR)")
        parser.add_argument(
            "--master",
            default=LOCAL_MASTER,
            help="HOST:PORT of the master's API, scraped for /metrics (comma-separated)",
        )
        parser.add_argument(
            "--scrape-interval",
            help="scrape and rule evaluation interval, e.g. 15s (default: MAC_SCRAPE_INTERVAL)",
        )
        parser.add_argument(
            "--alertmanager",
            help="URL of the Alertmanager alerts go to (default: MAC_ALERTMANAGER_URL); "
            "'none' sends them nowhere",
        )
        parser.add_argument(
            "--shard",
            help="this Prometheus's shard, 0..N-1: discover targets from the master's http_sd",
        )
        parser.add_argument("--of", help="the number N of Prometheus servers sharing the fleet")
        parser.add_argument(
            "--ca-file",
            help="the master's CA (MAC_TLS_DIR/ca.pem): scrape --master over HTTPS, verified "
            "against it",
        )

    def handle(self, *args, **options):
        if not options["out"]:
            raise CommandError("--out FILE is required.")
        out = Path(options["out"])
        sd_dir = Path(options["sd_dir"] or settings.SD_DIR)
        masters = [item.strip() for item in options["master"].split(",") if item.strip()]
        for master in masters:
            host, _, port = master.rpartition(":")
            if not host or not port.isdigit():
                raise CommandError(f"--master {master!r} is not HOST:PORT (e.g. {LOCAL_MASTER}).")
        scrape_interval = options["scrape_interval"] or settings.SCRAPE_INTERVAL
        if not valid_duration(scrape_interval):
            raise CommandError(
                f"--scrape-interval {scrape_interval!r} is not a duration as Prometheus writes "
                "it: e.g. 15s, 1m or 1m30s (each unit once, largest first, above zero)."
            )
        http_sd = self._http_sd(options, masters[0] if masters else LOCAL_MASTER, out)
        if http_sd is None:
            try:
                # Prometheus starts cleanly with "[]" files; scale-out's shares stay while
                # this master runs in that mode (a Prometheus of the site's own, by hand).
                ensure_target_files(sd_dir, settings.SCRAPE_SHARDS)
            except OSError as exc:
                raise CommandError(f"cannot create the targets directory {sd_dir}: {exc}") from None
        text = render_prometheus_yaml(
            str(sd_dir.resolve()),
            masters,
            out=str(out),
            scrape_interval=scrape_interval,
            # The targets change at most once a sweep: read them again as often.
            sd_refresh_interval=seconds_as_duration(settings.PROBE_INTERVAL),
            metrics_token_file=self._write_metrics_token(out),
            rule_files=[self._rules(out)],
            http_sd=http_sd,
            alertmanagers=self._alertmanagers(options["alertmanager"]),
            master_ca_file=self._ca_file(options["ca_file"]),
        )
        self._write(out, text)

    def _alertmanagers(self, given: str | None) -> list[str]:
        url = given or settings.ALERTMANAGER_URL
        if url.lower() == "none":
            return []
        try:
            alertmanager_config(url)
        except ValueError as exc:
            raise CommandError(f"--alertmanager / MAC_ALERTMANAGER_URL: {exc}") from None
        return [url]

    def _rules(self, out: Path) -> str:
        """The shipped rules, or a copy with MAC_ALERT_FOR and MAC_RUNBOOK_BASE_URL applied."""
        rendered = out.parent / "rules" / "alerts.yml"
        if not settings.ALERT_FOR and not settings.RUNBOOK_BASE_URL:
            rendered.unlink(missing_ok=True)
            return str(ALERT_RULES)
        try:
            overrides = parse_rule_for(settings.ALERT_FOR, shipped_rule_names())
        except RulesError as exc:
            raise CommandError(f"MAC_ALERT_FOR: {exc}") from None
        try:
            write_atomically(
                rendered, render_alert_rules(overrides, settings.RUNBOOK_BASE_URL).encode()
            )
        except OSError as exc:
            raise CommandError(f"cannot write {rendered}: {exc}") from None
        self.stdout.write(f"Wrote {rendered} (MAC_ALERT_FOR={settings.ALERT_FOR or '-'}).")
        return str(rendered.resolve())

    def _http_sd(self, options: dict, master: str, out: Path) -> HttpSd | None:
        """The shard of `--shard K --of N` with MAC_SD_TOKEN in a file; None for file-SD."""
        if options["shard"] is None and options["of"] is None:
            return None
        try:
            given = {name: options[name] for name in ("shard", "of") if options[name] is not None}
            shard, of = parse_shard(given)
        except ShardError as exc:
            raise CommandError(f"--{exc.parameter}: {exc}") from None
        if not settings.SD_TOKEN:
            raise CommandError(
                "--shard needs MAC_SD_TOKEN: set it on the master (mac env set "
                "MAC_SD_TOKEN=<a long random string>), restart the master, and run this again."
            )
        token_file = write_secret(out.parent / "sd_token", settings.SD_TOKEN)
        return HttpSd(
            master=master,
            shard=shard,
            of=of,
            token_file=token_file,
            ca_file=self._ca_file(options["ca_file"]),
        )

    def _ca_file(self, given: str | None) -> str | None:
        """The CA file, absolute; Prometheus would not start on a missing one."""
        if not given:
            return None
        path = Path(given).resolve()
        if not path.is_file():
            raise CommandError(
                f"--ca-file {given}: no such file; the proxy's prepare_tls makes it "
                "(MAC_TLS_DIR/ca.pem)."
            )
        return str(path)

    def _write_metrics_token(self, out: Path) -> str | None:
        """MAC_METRICS_TOKEN in a 0600 file beside the config, for Prometheus to send."""
        token_file = out.parent / "metrics_token"
        if not settings.METRICS_TOKEN:
            token_file.unlink(missing_ok=True)
            return None
        return write_secret(token_file, settings.METRICS_TOKEN)

    def _write(self, out: Path, text: str) -> None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc}") from None
        self.stdout.write(f"Wrote {out}.")


def write_secret(path: Path, secret: str) -> str:
    """`secret` in a 0600 file (never readable by others, not even for a moment); its
    absolute path, for a configuration to name. Shared with scaleout_config."""
    try:
        write_atomically(path, secret.encode(), mode=0o600)
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc}") from None
    return str(path.resolve())
