"""Scale-out mode of `mac start master` (MAC_SCRAPE_SHARDS=N >= 1): its services.

Instead of mac-prometheus the master then runs, from Debian's `victoria-metrics`:

- `store` (victoria-metrics on MAC_METRICS_STORE_PORT): the one store every scraper
  writes to and everything reads (charts, panels, /health, rules), with
  MAC_METRICS_RETENTION; it also scrapes the scrapers (rule MacScraperDown). A site
  store (MAC_METRICS_STORE_URL) replaces it;
- `scraper-K` for K in 0..N-1 (vmagent on MAC_SCRAPER_BASE_PORT + K): shard K of the
  fleet, discovered from the master's http_sd, so one node's targets share a scraper;
- `rules` (vmalert on MAC_RULES_PORT): MAC's rule files evaluated once, against the
  store, alerts sent to MAC's Alertmanager;
- `prometheus` keeps its name and port (29090) but is the targets view
  (healthcheck.targetsview): `/api/v1/targets` merged from every scraper, the rest
  passed to the store, so the guide's `curl localhost:29090/api/v1/targets` keeps its
  meaning.

docs/scaling.md says why these engines and how to move them to other machines.
"""

from __future__ import annotations

import json
import secrets
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from maccli.output import CliError
from maccli.runtimes import ServiceSpec
from node.config import NodeConfig

STORE_PORT = 29428
SCRAPER_BASE_PORT = 29430
RULES_PORT = 29480
DEFAULT_RETENTION = "15d"


def shards(cfg: NodeConfig) -> int:
    """MAC_SCRAPE_SHARDS: 0 (one Prometheus, the default) or the number of scrapers."""
    count = cfg.int_value("MAC_SCRAPE_SHARDS", 0)
    if count < 0 or count > 64:
        raise CliError(
            f"MAC_SCRAPE_SHARDS={count} is out of range: 0 (one Prometheus) or 1..64 scrapers.",
            commands=["mac env set MAC_SCRAPE_SHARDS=2"],
        )
    return count


def store_url(cfg: NodeConfig) -> str:
    """Where metrics are written and read in scale-out mode: the site's store or MAC's."""
    given = (cfg.get("MAC_METRICS_STORE_URL") or "").rstrip("/")
    return given or f"http://127.0.0.1:{cfg.int_value('MAC_METRICS_STORE_PORT', STORE_PORT)}"


def scraper_addresses(cfg: NodeConfig) -> list[str]:
    base = cfg.int_value("MAC_SCRAPER_BASE_PORT", SCRAPER_BASE_PORT)
    return [f"127.0.0.1:{base + index}" for index in range(shards(cfg))]


def folder(data: Path) -> Path:
    return data / "scaleout"


def sd_token(cfg: NodeConfig, data: Path) -> str:
    """MAC_SD_TOKEN, or one made once for this master (the scrapers' http_sd needs one)."""
    given = cfg.get("MAC_SD_TOKEN")
    if given:
        return given
    path = folder(data) / "sd_token"
    try:
        if path.exists():
            return path.read_text().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32))
        return path.read_text().strip()
    except OSError as exc:
        raise CliError(
            f"cannot keep the scrapers' http_sd token in {path}: {exc}",
            hint="Set one yourself, then run again:",
            commands=["mac env set MAC_SD_TOKEN=<a long random string>"],
        ) from None


def env_overrides(cfg: NodeConfig, data: Path, targets_url: str) -> dict[str, str]:
    """What every master process must agree on in scale-out mode.

    MAC_PROMETHEUS_URL (queries) is the store; MAC_TARGETS_URL (who scrapes what, and
    each target's health) is the merged targets view on 29090.
    """
    return {
        "MAC_SCRAPE_SHARDS": str(shards(cfg)),
        "MAC_PROMETHEUS_URL": store_url(cfg),
        "MAC_TARGETS_URL": targets_url,
        "MAC_SCRAPER_URLS": ",".join(f"http://{a}" for a in scraper_addresses(cfg)),
        "MAC_SD_TOKEN": sd_token(cfg, data),
    }


def specs(
    cfg: NodeConfig,
    data: Path,
    env: dict[str, str],
    *,
    views_port: int,
    master: str,
    alertmanager_url: str,
    project_spec: Callable[..., ServiceSpec],
) -> list[ServiceSpec]:
    """The scale-out services, in place of mac-prometheus (see the module docstring)."""
    django = [sys.executable, "-m", "django"]
    work = folder(data)
    store = store_url(cfg)
    scrapers = scraper_addresses(cfg)
    interval = cfg.get("MAC_SCRAPE_INTERVAL") or "15s"
    sd_check = f"{max(1, round(float(cfg.get('MAC_PROBE_INTERVAL') or 30)))}s"
    result: list[ServiceSpec] = []
    if not cfg.get("MAC_METRICS_STORE_URL"):
        port = cfg.int_value("MAC_METRICS_STORE_PORT", STORE_PORT)
        store_scrape = work / "store-scrape.yml"
        argv = [
            cfg.get("MAC_VICTORIA_METRICS_BIN") or "/usr/bin/victoria-metrics",
            f"-storageDataPath={store_data(data)}",
            f"-httpListenAddr=127.0.0.1:{port}",
            f"-retentionPeriod={cfg.get('MAC_METRICS_RETENTION') or DEFAULT_RETENTION}",
            f"-promscrape.config={store_scrape}",
            # Charts and rules see a sample a few seconds after it is scraped (the
            # store's default holds back the last 30 s).
            "-search.latencyOffset=5s",
        ]
        prestart = [
            [*django, "scaleout_config", "--store-scrape", str(store_scrape),
             "--scrapers", ",".join(scrapers)],
        ]  # fmt: skip
        result.append(_loopback_spec("store", argv, port, env, prestart))
    for index, address in enumerate(scrapers):
        port = int(address.rsplit(":", 1)[1])
        config = work / f"scraper-{index}.yml"
        argv = [
            cfg.get("MAC_VMAGENT_BIN") or "/usr/bin/vmagent",
            f"-promscrape.config={config}",
            f"-remoteWrite.url={store}/api/v1/write",
            # While the store is away, samples wait on disk and are sent later.
            f"-remoteWrite.tmpDataPath={work / f'scraper-{index}-buffer'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            # The targets change at most once per sweep: look for changes as often.
            f"-promscrape.httpSDCheckInterval={sd_check}",
        ]
        prestart = [
            [*django, "scaleout_config", "--scraper", str(index), "--of", str(len(scrapers)),
             "--master", master, "--out", str(config)],
        ]  # fmt: skip
        result.append(_loopback_spec(f"scraper-{index}", argv, port, env, prestart))
    rules_port = cfg.int_value("MAC_RULES_PORT", RULES_PORT)
    rules = work / "rules"
    result.append(
        _loopback_spec(
            "rules",
            [
                cfg.get("MAC_VMALERT_BIN") or "/usr/bin/vmalert",
                f"-rule={rules / 'alerts.yml'}",
                f"-rule={rules / 'scaleout.yml'}",
                f"-datasource.url={store}",
                f"-notifier.url={alertmanager_url}",
                # Alerts keep Prometheus's labels (vmalert would add `alertgroup`), so the
                # master's own MacNodeOffline post and the rule's are one alert to
                # Alertmanager: one notification per incident.
                "-disableAlertgroupLabel",
                # ALERTS series into the store, and read back to keep `for:` across restarts.
                f"-remoteWrite.url={store}",
                f"-remoteRead.url={store}",
                f"-evaluationInterval={interval}",
                f"-httpListenAddr=127.0.0.1:{rules_port}",
            ],
            rules_port,
            env,
            [[*django, "scaleout_config", "--rules", str(rules)]],
        )
    )
    view_argv = [
        sys.executable, "-m", "healthcheck.targetsview",
        "--listen", f"127.0.0.1:{views_port}", "--store", store,
        *[arg for address in scrapers for arg in ("--scraper", f"http://{address}")],
    ]  # fmt: skip
    # In Prometheus's place on the loopback (the front door serves it under /prometheus/).
    view = project_spec("prometheus", view_argv, views_port, env, [])
    return [*result, view]


def _loopback_spec(
    name: str, argv: list[str], port: int, env: dict[str, str], prestart: list[list[str]]
) -> ServiceSpec:
    """An engine of scale-out mode: on loopback, alive when its /health answers."""
    return ServiceSpec(
        name, argv, port=port, liveness_path="/health", env=env, prestart=prestart,
        ready_timeout=60, host="127.0.0.1", bind="127.0.0.1",
    )  # fmt: skip


def store_data(data: Path) -> Path:
    return folder(data) / "store"


def scraper_shares(cfg: NodeConfig) -> list[tuple[str, str]]:
    """(scraper, what it scrapes now) per scraper, from its own /api/v1/targets."""
    lines = []
    scrapers = scraper_addresses(cfg)
    for index, address in enumerate(scrapers):
        name = f"scraper-{index} ({index}/{len(scrapers)}, {address})"
        try:
            with urllib.request.urlopen(f"http://{address}/api/v1/targets", timeout=3) as answer:
                active = json.load(answer)["data"]["activeTargets"]
        except (OSError, ValueError, KeyError) as exc:
            why = getattr(exc, "reason", exc)
            lines.append((name, f"not answering ({why}): its nodes' metrics have a gap"))
            continue
        nodes = {t["labels"].get("node") for t in active if t["labels"].get("node")}
        up = sum(1 for t in active if t.get("health") == "up")
        lines.append((name, f"{len(nodes)} nodes, {len(active)} targets, {up} up"))
    return lines
