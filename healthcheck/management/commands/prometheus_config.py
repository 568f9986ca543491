"""`manage.py prometheus_config --out FILE`: write the Prometheus config for this master."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from healthcheck.promconfig import (
    DOCKER_MASTER,
    DOCKER_SD_DIR,
    LOCAL_MASTER,
    render_prometheus_yaml,
)
from healthcheck.targets import ensure_target_files


class Command(BaseCommand):
    help = (
        "Write a Prometheus configuration that scrapes the exporters listed in the sweep's "
        "file-SD targets (MAC_SD_DIR) and the master's own /metrics."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", required=True, help="file to write (e.g. var/prometheus.yml)")
        parser.add_argument("--sd-dir", help="directory of the targets files (default: MAC_SD_DIR)")
        parser.add_argument(
            "--master",
            default=LOCAL_MASTER,
            help="HOST:PORT of the master's API, scraped for /metrics (comma-separated)",
        )
        parser.add_argument("--scrape-interval", default="15s", help="e.g. 15s")
        parser.add_argument(
            "--docker",
            action="store_true",
            help=f"the Compose flavour: targets in {DOCKER_SD_DIR}, master at {DOCKER_MASTER}",
        )

    def handle(self, *args, **options):
        out = Path(options["out"])
        if options["docker"]:
            text = render_prometheus_yaml(DOCKER_SD_DIR, [DOCKER_MASTER], out=str(out), docker=True)
            self._write(out, text)
            return
        sd_dir = Path(options["sd_dir"] or settings.SD_DIR)
        masters = [item.strip() for item in options["master"].split(",") if item.strip()]
        for master in masters:
            host, _, port = master.rpartition(":")
            if not host or not port.isdigit():
                raise CommandError(f"--master {master!r} is not HOST:PORT (e.g. {LOCAL_MASTER}).")
        try:
            ensure_target_files(sd_dir)  # Prometheus starts cleanly with "[]" files
        except OSError as exc:
            raise CommandError(f"cannot create the targets directory {sd_dir}: {exc}") from None
        text = render_prometheus_yaml(
            str(sd_dir.resolve()),
            masters,
            out=str(out),
            scrape_interval=options["scrape_interval"],
        )
        self._write(out, text)

    def _write(self, out: Path, text: str) -> None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc}") from None
        self.stdout.write(f"Wrote {out}.")
