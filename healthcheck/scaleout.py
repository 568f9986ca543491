"""Scale-out mode (MAC_SCRAPE_SHARDS=N): the configurations of its engines, and its /health.

`mac start master` with N >= 1 runs N vmagent scrapers, one victoria-metrics store
and one vmalert (maccli.scaleout says how). This module holds the master side:

- scraper_config(): shard K's scrape configuration, which is MAC's Prometheus
  configuration for that shard (healthcheck.promconfig with HttpSd): every exporter
  job discovers shard K's nodes from the master's http_sd (healthcheck.httpsd), so all
  of one node's targets go to one scraper, and only shard 0 scrapes the master itself;
- store_scrape_config(): what the store scrapes on its own, the scrapers' /metrics,
  so that `up{job="mac-scraper"}` says when one is down (rule MacScraperDown);
- check_scrapers() / check_store(): /health's view, `degraded` with the reason
  while a scraper is away (naming the share of the fleet whose metrics have a gap) or
  the store does not answer or runs out of disk. Probing, the inventory and the
  dashboard's status never read the store, so neither failure makes /health 503.

The process runtime passes the layout in the environment: MAC_SCRAPE_SHARDS,
MAC_SCRAPER_URLS (one URL per shard, in shard order) and MAC_PROMETHEUS_URL (the
store: everything that queries metrics reads it).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from django.conf import settings

from healthcheck.httpsd import shard_of
from healthcheck.promconfig import HttpSd, render_prometheus_config
from inventory.models import Node

# MAC's own rules for scale-out mode, beside the shipped alerts.yml.
SCALEOUT_RULES = Path(__file__).resolve().parent / "prometheus" / "scaleout.yml"
SCRAPER_JOB = "mac-scraper"
CHECK_TIMEOUT = 2.0


def scraper_config(
    shard: int, of: int, master: str, token_file: str, metrics_token_file: str | None
) -> dict:
    """Shard `shard` of `of`'s scrape configuration (vmagent reads Prometheus's format).

    vmagent parses strictly and has no rule evaluation nor per-config http_sd refresh
    (its -promscrape.httpSDCheckInterval flag does that): those two keys go.
    """
    config = render_prometheus_config(
        "",
        [master],
        scrape_interval=settings.SCRAPE_INTERVAL,
        metrics_token_file=metrics_token_file,
        http_sd=HttpSd(master=master, shard=shard, of=of, token_file=token_file),
    )
    config["global"].pop("evaluation_interval", None)
    for job in config["scrape_configs"]:
        for sd in job.get("http_sd_configs", ()):
            sd.pop("refresh_interval", None)
    return config


def store_scrape_config(scrapers: list[str]) -> dict:
    """The store's own scrape of every scraper, labelled with its shard."""
    of = len(scrapers)
    return {
        "global": {"scrape_interval": settings.SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": SCRAPER_JOB,
                "static_configs": [
                    {"targets": [address], "labels": {"shard": f"{index}/{of}"}}
                    for index, address in enumerate(scrapers)
                ],
            }
        ],
    }


def dump(config: dict) -> str:
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=CHECK_TIMEOUT) as answer:  # noqa: S310
        return answer.read()


def _answers(url: str) -> str:
    """ "" when `url`/health answers 200, else why not."""
    try:
        _get(f"{url.rstrip('/')}/health")
    except urllib.error.HTTPError as exc:
        return f"answers HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"does not answer ({reason})"
    return ""


def shares(of: int) -> list[int]:
    """How many registered nodes each of `of` shards holds."""
    counts = [0] * of
    for node_id in Node.objects.order_by().values_list("id", flat=True).iterator():
        counts[shard_of(node_id, of)] += 1
    return counts


def check_scrapers() -> tuple[bool, str]:
    """Whether every scraper answers; a missing one names its share of the fleet."""
    urls = settings.SCRAPER_URLS
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(urls)))) as pool:
        problems = list(pool.map(_answers, urls))
    down = [(index, why) for index, why in enumerate(problems) if why]
    if not down:
        return True, f"{len(urls)} scrapers answer"
    counts = shares(len(urls))
    parts = [
        f"scraper {index}/{len(urls)} at {urls[index]} {why}: metrics of its {counts[index]} "
        "nodes have a gap until it is back (supervision restarts it; mac status master)"
        for index, why in down
    ]
    return False, "; ".join(parts)


def _free_disk(store: str) -> float | None:
    """The store's free disk bytes (its vm_free_disk_space_bytes), None when unknown."""
    for line in _get(f"{store}/metrics").decode().splitlines():
        if line.startswith("vm_free_disk_space_bytes"):
            return float(line.rsplit(" ", 1)[1])
    return None


def check_store() -> tuple[bool, str]:
    """Whether the store answers and has room; the reason when not."""
    store = settings.PROMETHEUS_URL.rstrip("/")
    why = _answers(store)
    if why:
        return False, (
            f"the metrics store at {store} {why}: charts are empty and rules are not "
            "evaluated; scrapers buffer on disk until it is back (mac status master)"
        )
    try:
        free = _free_disk(store)
    except (OSError, ValueError) as exc:
        return False, f"the metrics store at {store} does not report its disk ({exc})"
    minimum = settings.METRICS_MIN_FREE_BYTES
    if free is not None and free < minimum:
        return False, (
            f"the metrics store's disk has {free / 2**20:,.0f} MiB free, below "
            f"MAC_METRICS_MIN_FREE_BYTES ({minimum / 2**20:,.0f} MiB): free space or lower "
            "MAC_METRICS_RETENTION; the store stops accepting samples when it is full"
        )
    return True, f"answers at {store}" + (
        f", {free / 2**30:,.1f} GiB free" if free is not None else ""
    )


def scaleout_checks() -> dict[str, tuple[bool, str]]:
    """/health's optional checks of scale-out mode; none when MAC_SCRAPE_SHARDS is 0."""
    if settings.SCRAPE_SHARDS < 1:
        return {}
    return {"metrics_store": check_store(), "scrapers": check_scrapers()}


def scraper_gaps() -> list[str]:
    """One line per scraper that is away, for the fleet page's banner."""
    if settings.SCRAPE_SHARDS < 1:
        return []
    ok, detail = check_scrapers()
    return [] if ok else detail.split("; ")
