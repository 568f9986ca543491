"""Scale-out mode (MAC_SCRAPE_SHARDS=N): the configurations of its engines, and its /health.

`mac start master` with N >= 1 runs N vmagent scrapers, one victoria-metrics store
and one vmalert (maccli.master.scaleout says how). This module holds the master side:

- scraper_config(): shard K's scrape configuration, which is MAC's Prometheus
  configuration for that shard (scraping.promconfig with file_shard): every exporter
  job reads shard K's targets files, written by the sweep (scraping.targets), so all
  of one node's targets go to one scraper, the API's being down stops no scraper from
  learning its targets, and only shard 0 scrapes the master itself;
- store_scrape_config(): what the store scrapes on its own, the scrapers' /metrics,
  so that `up{job="mac-scraper"}` says when one is down (rule MacScraperDown);
- check_scrapers() / check_store() / check_rules() / check_targets_view(): /health's
  view, `degraded` with the reason while a scraper is away (naming the share of the
  fleet whose metrics have a gap), the store does not answer or runs out of disk, or
  vmalert or the targets view does not answer. Probing, the inventory and the
  dashboard's status never read them, so no such failure makes /health 503.

/health and the fleet page never wait on an engine (issue 31): they read the last
answer from the cache (scaleout_checks(), scraper_gaps()), and the first reader to
find it older than CHECK_REUSE starts one background thread, for every API worker
at once (a lock in the cache), that asks the engines within CHECK_TIMEOUT each and
counts the share of a missing scraper; the same pattern as /health's Prometheus check
(healthcheck.health), shared through the cache so that one worker's answer serves all.

The process runtime passes the layout in the environment: MAC_SCRAPE_SHARDS,
MAC_SCRAPER_URLS (one URL per shard, in shard order), MAC_PROMETHEUS_URL (the
store: everything that queries metrics reads it), MAC_TARGETS_URL (the targets view)
and MAC_RULES_URL (vmalert).
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import yaml
from django.conf import settings
from django.core.cache import cache
from django.db import connections

from inventory.models import Node
from scraping.promconfig import HttpSd, render_prometheus_config
from scraping.targets import shard_of

SCRAPER_JOB = "mac-scraper"
# Seconds each request of the background check may take (a frozen engine accepts the
# connection and never answers).
CHECK_TIMEOUT = 1.0
# Seconds an answer is shown before a reader starts a new check; past CHECK_STALE
# (no check has finished: none could start) /health says how old it is.
CHECK_REUSE = 2.0
CHECK_STALE = 30.0
# The checks' answer in the cache (and, under it + ":checking", the lock of the one
# thread that renews it).
CHECKS_KEY = "healthcheck:scaleout:checks"

log = logging.getLogger(__name__)


def scraper_config(
    shard: int,
    of: int,
    master: str,
    metrics_token_file: str | None,
    *,
    sd_dir: str = "",
    sd_token_file: str | None = None,
) -> dict:
    """Shard `shard` of `of`'s scrape configuration (vmagent reads Prometheus's format).

    MAC's Prometheus configuration with the exporter jobs reading that shard's files
    under `sd_dir`, which the sweep writes beside the whole ones (scraping.targets): the
    scrapers `mac` runs are on the master's host and need nothing of the API to learn
    their targets. With `sd_token_file`, for a scraper on another host, they read the
    master's http_sd instead (scraping.httpsd, the same split). vmagent parses strictly
    and has no rule evaluation nor per-config discovery refresh (its
    -promscrape.fileSDCheckInterval and httpSDCheckInterval flags do that): those go.
    """
    config = render_prometheus_config(
        sd_dir,
        [master],
        scrape_interval=settings.SCRAPE_INTERVAL,
        metrics_token_file=metrics_token_file,
        http_sd=HttpSd(master, shard, of, sd_token_file) if sd_token_file else None,
        file_shard=None if sd_token_file else (shard, of),
    )
    config["global"].pop("evaluation_interval", None)
    for job in config["scrape_configs"]:
        for sd in (*job.get("file_sd_configs", ()), *job.get("http_sd_configs", ())):
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


def _answers(url: str, path: str = "/health") -> str:
    """ "" when `url` answers 200 at `path`, else why not."""
    try:
        _get(f"{url.rstrip('/')}{path}")
    except urllib.error.HTTPError as exc:
        return f"answers HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"does not answer ({reason})"
    except http.client.HTTPException as exc:  # urllib lets these out unwrapped
        return f"does not speak HTTP ({type(exc).__name__}: {exc}); is it the right port?"
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
            return float(line.split()[-1])
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
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return False, f"the metrics store at {store} does not report its disk ({exc!r})"
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


def check_rules() -> tuple[bool, str]:
    """Whether vmalert, which evaluates MAC's alert rules against the store, answers."""
    url = settings.RULES_URL
    why = _answers(url)
    if why:
        return False, (
            f"the rule evaluator (vmalert) at {url} {why}: MAC's alert rules are not "
            "evaluated (the master still posts its node alerts itself); supervision "
            "restarts it (mac status master)"
        )
    return True, f"answers at {url}"


def check_targets_view() -> tuple[bool, str]:
    """Whether the targets view, in Prometheus's place on its port, answers."""
    url = settings.TARGETS_URL
    why = _answers(url, "/-/ready")
    if why:
        return False, (
            f"the targets view at {url} {why}: /prometheus/ at the front door, the node "
            "page's scrape errors and `curl localhost:29090/api/v1/targets` fail until it "
            "is back; supervision restarts it (mac status master)"
        )
    return True, f"answers at {url}"


def check_engines() -> dict[str, tuple[bool, str]]:
    """Ask every engine now, each within CHECK_TIMEOUT (the background thread's work).

    A check that raises is that engine's failed answer: an exception here would leave no
    answer in the cache, and /health saying "first check under way" for good."""
    others = {"metrics_store": check_store}
    if settings.RULES_URL:
        others["rules"] = check_rules
    if settings.TARGETS_URL != settings.PROMETHEUS_URL:
        others["targets_view"] = check_targets_view
    with ThreadPoolExecutor(max_workers=len(others), thread_name_prefix="mac-engine") as pool:
        asked = {name: pool.submit(_never_raises, name, check) for name, check in others.items()}
        # In this thread: a missing scraper's share is counted in the database.
        scrapers = _never_raises("scrapers", check_scrapers)
        checked = {name: future.result() for name, future in asked.items()}
    return {"metrics_store": checked.pop("metrics_store"), "scrapers": scrapers, **checked}


ENGINE_NAMES = {
    "metrics_store": "the metrics store",
    "scrapers": "the scrapers",
    "rules": "the rule evaluator (vmalert)",
    "targets_view": "the targets view",
}


def _never_raises(name: str, check: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
    try:
        return check()
    except Exception as exc:
        log.warning("checking %s failed", ENGINE_NAMES[name], exc_info=True)
        why = f"{type(exc).__name__}: {exc}"
        return False, f"{ENGINE_NAMES[name]} could not be checked ({why}); mac status master"[:400]


def _checks_key() -> str:
    """The cache key of the answers for the engines configured now (a test, or a master
    whose settings changed, never reads another layout's answer)."""
    engines = [settings.PROMETHEUS_URL, settings.TARGETS_URL, settings.RULES_URL]
    layout = "|".join([*engines, *settings.SCRAPER_URLS])
    return f"{CHECKS_KEY}:{_generation}:{hashlib.sha256(layout.encode()).hexdigest()[:16]}"


_generation = 0


def forget_engine_checks() -> None:
    """Start afresh (tests: a port reused by another engine must not inherit its answer)."""
    global _generation
    _generation += 1


def refresh_engine_checks() -> dict[str, tuple[bool, str]]:
    """Check the engines now and keep the answer for every reader (none when off)."""
    if settings.SCRAPE_SHARDS < 1:
        return {}
    checked = check_engines()
    cache.set(_checks_key(), {"at": time.time(), "checks": checked}, None)
    return checked


def _refresh_in_background() -> None:
    """One thread for all the API workers renews the answer; readers never wait for it."""
    # The lock outlives a thread that hangs or dies, by the longest a check can take.
    if not cache.add(f"{_checks_key()}:checking", "1", timeout=int(4 * CHECK_TIMEOUT) + 5):
        return
    threading.Thread(target=_refresh, name="mac-engine-check", daemon=True).start()


def _refresh() -> None:
    try:
        refresh_engine_checks()
    except Exception:  # the next reader tries again; /health shows the age meanwhile
        log.exception("checking the scale-out engines failed")
    finally:
        try:
            cache.delete(f"{_checks_key()}:checking")
        finally:
            connections.close_all()  # this thread's own database connection (shares())


def scaleout_checks() -> dict[str, tuple[bool, str]]:
    """/health's optional checks of scale-out mode, from the cache (never an engine's
    wait); none when MAC_SCRAPE_SHARDS is 0."""
    if settings.SCRAPE_SHARDS < 1:
        return {}
    last = cache.get(_checks_key())
    age = time.time() - last["at"] if last else None
    if age is None or age >= CHECK_REUSE:
        _refresh_in_background()
    if last is None:
        return {name: (True, "first check under way") for name in ("metrics_store", "scrapers")}
    checks = {name: tuple(result) for name, result in last["checks"].items()}
    if age >= CHECK_STALE:
        return {
            name: (ok, f"{detail} (checked {age:.0f} s ago; no check has finished since)")
            for name, (ok, detail) in checks.items()
        }
    return checks


def scraper_gaps() -> list[str]:
    """One line per scraper that is away, for the fleet page's banner (from the cache)."""
    try:
        ok, detail = scaleout_checks().get("scrapers", (True, ""))
    except Exception:  # the cache is away: /health says so, not the fleet page
        return []
    return [] if ok else detail.split("; ")
