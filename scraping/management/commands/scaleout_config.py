"""`manage.py scaleout_config`: the files of scale-out mode's engines (MAC_SCRAPE_SHARDS).

    --scraper K --of N --master HOST:PORT --out FILE   shard K's vmagent configuration
                                                       (and the shares' targets files, in
                                                       MAC_SD_DIR, from the inventory)
        [--http-sd]                                    for a scraper on another host: its
                                                       share from the master's http_sd
    --store-scrape FILE --scrapers A,B,...             what the store scrapes (the scrapers)
    --rules DIR                                        the rule files vmalert loads

Each service of `mac start master` runs the one it needs before it starts, so the
files are always written from the settings in effect (MAC_SCRAPE_INTERVAL,
MAC_ALERT_FOR, MAC_RUNBOOK_BASE_URL, MAC_SD_DIR, MAC_METRICS_TOKEN).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from contract.atomicfile import write_atomically
from inventory.models import Node
from scraping.engines import dump, scraper_config, store_scrape_config
from scraping.httpsd import ShardError, parse_shard
from scraping.management.commands.prometheus_config import write_secret
from scraping.promconfig import (
    ALERT_RULES,
    SCALEOUT_RULES,
    RulesError,
    parse_rule_for,
    render_alert_rules,
    shipped_rule_names,
)
from scraping.targets import TARGET_FIELDS, ensure_target_files, write_targets


class Command(BaseCommand):
    help = "Write the scrape, store and rule files of scale-out mode (MAC_SCRAPE_SHARDS)."
    # A step of `mac start master`, after its migrate ran Django's system checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--scraper", help="this scraper's shard K (0..N-1)")
        parser.add_argument("--of", help="the number N of scrapers")
        parser.add_argument(
            "--master", help="HOST:PORT of the master's /metrics (shard 0 scrapes it)"
        )
        parser.add_argument("--out", help="file to write the scraper's configuration to")
        parser.add_argument(
            "--http-sd",
            action="store_true",
            help="for a scraper on another host: read the master's http_sd, not the files",
        )
        parser.add_argument("--store-scrape", help="file to write the store's own scrape to")
        parser.add_argument("--scrapers", help="HOST:PORT of each scraper, comma-separated")
        parser.add_argument("--rules", help="folder to write the rule files vmalert loads to")

    def handle(self, *args, **options):
        if options["scraper"] is not None:
            self._scraper(options)
        elif options["store_scrape"]:
            scrapers = [s.strip() for s in (options["scrapers"] or "").split(",") if s.strip()]
            if not scrapers:
                raise CommandError("--store-scrape needs --scrapers HOST:PORT,...")
            self._write(Path(options["store_scrape"]), dump(store_scrape_config(scrapers)))
        elif options["rules"]:
            self._rules(Path(options["rules"]))
        else:
            raise CommandError("give --scraper K --of N, --store-scrape FILE or --rules DIR")

    def _scraper(self, options: dict) -> None:
        try:
            shard, of = parse_shard({"shard": options["scraper"], "of": options["of"] or ""})
        except ShardError as exc:
            name = "scraper" if exc.parameter == "shard" else exc.parameter
            raise CommandError(f"--{name}: {exc}") from None
        if not options["master"] or not options["out"]:
            raise CommandError("--scraper needs --master HOST:PORT and --out FILE")
        out = Path(options["out"])
        metrics = (
            write_secret(out.parent / "metrics_token", settings.METRICS_TOKEN)
            if settings.METRICS_TOKEN
            else None
        )
        if options["http_sd"]:
            self._write(out, dump(self._remote_scraper(shard, of, options["master"], out, metrics)))
            return
        # Absolute: vmagent reads a relative file_sd path from the config file's folder.
        sd_dir = Path(settings.SD_DIR).resolve()
        try:
            self._targets(sd_dir, of)
        except OSError as exc:
            raise CommandError(f"cannot write the targets files in {sd_dir}: {exc}") from None
        config = scraper_config(shard, of, options["master"], metrics, sd_dir=str(sd_dir))
        self._write(out, dump(config))

    def _targets(self, sd_dir: Path, of: int) -> None:
        """The shares of `of` scrapers as the inventory has them now, so that a scraper
        (the first, or one of a new number of them) starts with its targets rather than
        nothing until the worker's next sweep; "[]" where the database cannot say."""
        try:
            rows = list(Node.objects.order_by().values(*TARGET_FIELDS))
        except DatabaseError as exc:
            self.stderr.write(f"the inventory is not readable ({exc}); the sweep writes them")
        else:
            write_targets(rows, sd_dir, cluster_name=settings.CLUSTER_NAME, shards=of)
        ensure_target_files(sd_dir, of)  # and no share of another number of scrapers

    def _remote_scraper(
        self, shard: int, of: int, master: str, out: Path, metrics: str | None
    ) -> dict:
        """A scraper on another host: its share from the master's http_sd, with the token."""
        if not settings.SD_TOKEN:
            raise CommandError(
                "--http-sd reads the master's http_sd, which needs MAC_SD_TOKEN (or the "
                "metrics token): set MAC_SD_TOKEN on the master, restart it, run this again."
            )
        token = write_secret(out.parent / "sd_token", settings.SD_TOKEN)
        return scraper_config(shard, of, master, metrics, sd_token_file=token)

    def _rules(self, folder: Path) -> None:
        try:
            overrides = parse_rule_for(settings.ALERT_FOR, shipped_rule_names())
        except RulesError as exc:
            raise CommandError(f"MAC_ALERT_FOR: {exc}") from None
        for source in (ALERT_RULES, SCALEOUT_RULES):
            # Scale-out's own rules too: the same `for:` settings, runbook links, and
            # PromQL-meaning spelling as MAC's.
            rendered = render_alert_rules(
                overrides, settings.RUNBOOK_BASE_URL, metricsql=True, source=source
            )
            self._write(folder / source.name, rendered)

    def _write(self, path: Path, text: str) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, text.encode())
        except OSError as exc:
            raise CommandError(f"cannot write {path}: {exc}") from None
        self.stdout.write(f"Wrote {path}.")
