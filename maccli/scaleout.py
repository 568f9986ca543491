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

Both runtimes run the same services from the same specs; a Layout says where. The
process runtime runs them on this host's loopback; the docker runtime runs each in a
container of MAC's image on the master's Compose network, where they reach each other
by service name, from a Compose file written from the specs (compose_overlay) and
given after docker-compose.master.yml. Their ports are published on the host's
127.0.0.1 only, so `mac status master` and `mac backup metrics` work alike.

docs/scaling.md says why these engines and how to move them to other machines.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from contract.atomicfile import write_atomically
from maccli.output import CliError
from maccli.runtimes import ServiceSpec
from node.config import NodeConfig

STORE_PORT = 29428
SCRAPER_BASE_PORT = 29430
RULES_PORT = 29480
DEFAULT_RETENTION = "15d"
# The engines' services (the targets view keeps Prometheus's name, `prometheus`).
ENGINE_SERVICE = re.compile(r"store|rules|scraper-\d+")
OVERLAY_NAME = "docker-compose.scaleout.yml"


@dataclass(frozen=True)
class Layout:
    """Where the engines run and how they reach each other and the master."""

    work: Path  # their configuration files, rules and the scrapers' buffers
    store_data: Path
    listen: str  # the address each engine listens on
    python: str  # the interpreter that writes their files (manage.py scaleout_config)
    master: str  # HOST:PORT of the master's http_sd and /metrics, for the scrapers
    alertmanager_url: str
    views_port: int  # the targets view's (Prometheus's) port, where it listens
    docker: bool = False

    def host(self, service: str) -> str:
        """How the other engines and the master reach `service`."""
        return service if self.docker else "127.0.0.1"


def process_layout(data: Path, *, master: str, alertmanager_url: str, views_port: int) -> Layout:
    """This host's loopback, the master's data folder."""
    return Layout(
        work=folder(data), store_data=store_data(data), listen="127.0.0.1",
        python=sys.executable, master=master, alertmanager_url=alertmanager_url,
        views_port=views_port,
    )  # fmt: skip


# Inside the containers (docker/docker-compose.master.yml): volumes and service names.
DOCKER_DATA = Path("/var/lib/mac")
DOCKER_STORE_DATA = Path("/var/lib/mac-metrics")
STORE_VOLUME = "mac-metrics"  # Compose names it mac_mac-metrics (project mac)


def docker_layout(cfg: NodeConfig) -> Layout:
    """The master's Compose network: service names, every address of a container."""
    return Layout(
        work=folder(DOCKER_DATA), store_data=DOCKER_STORE_DATA, listen="0.0.0.0",
        python="python", master="api-server:28080",
        alertmanager_url=cfg.get("MAC_ALERTMANAGER_URL") or "http://mac-alertmanager:29093",
        views_port=29090, docker=True,
    )  # fmt: skip


def shards(cfg: NodeConfig) -> int:
    """MAC_SCRAPE_SHARDS: 0 (one Prometheus, the default) or the number of scrapers."""
    count = cfg.int_value("MAC_SCRAPE_SHARDS", 0)
    if count < 0 or count > 64:
        raise CliError(
            f"MAC_SCRAPE_SHARDS={count} is out of range: 0 (one Prometheus) or 1..64 scrapers.",
            commands=["mac env set MAC_SCRAPE_SHARDS=2"],
        )
    return count


def _store_port(cfg: NodeConfig) -> int:
    return cfg.int_value("MAC_METRICS_STORE_PORT", STORE_PORT)


def store_url(cfg: NodeConfig, layout: Layout | None = None) -> str:
    """Where metrics are written and read in scale-out mode: the site's store or MAC's
    (as `layout`'s engines reach it; from this host when no layout is given)."""
    given = (cfg.get("MAC_METRICS_STORE_URL") or "").rstrip("/")
    host = layout.host("store") if layout else "127.0.0.1"
    return given or f"http://{host}:{_store_port(cfg)}"


def _scraper_port(cfg: NodeConfig, index: int) -> int:
    return cfg.int_value("MAC_SCRAPER_BASE_PORT", SCRAPER_BASE_PORT) + index


def scraper_addresses(cfg: NodeConfig, layout: Layout | None = None) -> list[str]:
    """HOST:PORT of each scraper, in shard order (from this host when no layout)."""
    return [
        f"{layout.host(f'scraper-{k}') if layout else '127.0.0.1'}:{_scraper_port(cfg, k)}"
        for k in range(shards(cfg))
    ]


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
        write_atomically(path, secrets.token_urlsafe(32).encode(), mode=0o600)
        return path.read_text().strip()
    except OSError as exc:
        raise CliError(
            f"cannot keep the scrapers' http_sd token in {path}: {exc}",
            hint="Set one yourself, then run again:",
            commands=["mac env set MAC_SD_TOKEN=<a long random string>"],
        ) from None


def env_overrides(cfg: NodeConfig, layout: Layout) -> dict[str, str]:
    """What every master process must agree on in scale-out mode (MAC_SD_TOKEN aside:
    the runtime hands it over, see sd_token).

    MAC_PROMETHEUS_URL (queries) is the store; MAC_TARGETS_URL (who scrapes what, and
    each target's health) is the merged targets view on 29090.
    """
    return {
        "MAC_SCRAPE_SHARDS": str(shards(cfg)),
        "MAC_PROMETHEUS_URL": store_url(cfg, layout),
        "MAC_TARGETS_URL": f"http://{layout.host('prometheus')}:{layout.views_port}",
        "MAC_SCRAPER_URLS": ",".join(f"http://{a}" for a in scraper_addresses(cfg, layout)),
    }


def _binary(cfg: NodeConfig, layout: Layout, setting: str, name: str) -> str:
    """The engine's program: Debian's, or MAC_*_BIN on this host (not in MAC's image)."""
    default = f"/usr/bin/{name}"
    return default if layout.docker else (cfg.get(setting) or default)


def specs(
    cfg: NodeConfig,
    layout: Layout,
    env: dict[str, str],
    *,
    views_port: int,
    project_spec: Callable[..., ServiceSpec],
) -> list[ServiceSpec]:
    """The scale-out services, in place of mac-prometheus (see the module docstring)."""
    django = [layout.python, "-m", "django"]
    work = layout.work
    store = store_url(cfg, layout)
    scrapers = scraper_addresses(cfg, layout)
    interval = cfg.get("MAC_SCRAPE_INTERVAL") or "15s"
    sd_check = f"{max(1, round(float(cfg.get('MAC_PROBE_INTERVAL') or 30)))}s"
    result: list[ServiceSpec] = []
    if not cfg.get("MAC_METRICS_STORE_URL"):
        port = _store_port(cfg)
        store_scrape = work / "store-scrape.yml"
        argv = [
            _binary(cfg, layout, "MAC_VICTORIA_METRICS_BIN", "victoria-metrics"),
            f"-storageDataPath={layout.store_data}",
            f"-httpListenAddr={layout.listen}:{port}",
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
        result.append(_engine_spec("store", argv, port, env, prestart))
    for index in range(len(scrapers)):
        port = _scraper_port(cfg, index)
        config = work / f"scraper-{index}.yml"
        argv = [
            _binary(cfg, layout, "MAC_VMAGENT_BIN", "vmagent"),
            f"-promscrape.config={config}",
            f"-remoteWrite.url={store}/api/v1/write",
            # While the store is away, samples wait on disk and are sent later.
            f"-remoteWrite.tmpDataPath={work / f'scraper-{index}-buffer'}",
            f"-httpListenAddr={layout.listen}:{port}",
            # The targets change at most once per sweep: look for changes as often.
            f"-promscrape.httpSDCheckInterval={sd_check}",
        ]
        prestart = [
            [*django, "scaleout_config", "--scraper", str(index), "--of", str(len(scrapers)),
             "--master", layout.master, "--out", str(config)],
        ]  # fmt: skip
        result.append(_engine_spec(f"scraper-{index}", argv, port, env, prestart))
    rules_port = cfg.int_value("MAC_RULES_PORT", RULES_PORT)
    rules = work / "rules"
    result.append(
        _engine_spec(
            "rules",
            [
                _binary(cfg, layout, "MAC_VMALERT_BIN", "vmalert"),
                f"-rule={rules / 'alerts.yml'}",
                f"-rule={rules / 'scaleout.yml'}",
                f"-datasource.url={store}",
                f"-notifier.url={layout.alertmanager_url}",
                # Alerts keep Prometheus's labels (vmalert would add `alertgroup`), so the
                # master's own MacNodeOffline post and the rule's are one alert to
                # Alertmanager: one notification per incident.
                "-disableAlertgroupLabel",
                # ALERTS series into the store, and read back to keep `for:` across restarts.
                f"-remoteWrite.url={store}",
                f"-remoteRead.url={store}",
                f"-evaluationInterval={interval}",
                f"-httpListenAddr={layout.listen}:{rules_port}",
            ],
            rules_port,
            env,
            [[*django, "scaleout_config", "--rules", str(rules)]],
        )
    )
    view_argv = [
        layout.python, "-m", "healthcheck.targetsview",
        "--listen", f"{layout.listen}:{layout.views_port}", "--store", store,
        *[arg for address in scrapers for arg in ("--scraper", f"http://{address}")],
    ]  # fmt: skip
    # In Prometheus's place on the loopback (the front door serves it under /prometheus/).
    view = project_spec("prometheus", view_argv, views_port, env, [])
    return [*result, view]


def _engine_spec(
    name: str, argv: list[str], port: int, env: dict[str, str], prestart: list[list[str]]
) -> ServiceSpec:
    """An engine of scale-out mode: on this host's loopback (its own, or the port its
    container publishes there), alive when its /health answers."""
    return ServiceSpec(
        name, argv, port=port, liveness_path="/health", env=env, prestart=prestart,
        ready_timeout=60, host="127.0.0.1", bind="127.0.0.1",
    )  # fmt: skip


def store_data(data: Path) -> Path:
    return folder(data) / "store"


# What the engines' containers need to write their files (manage.py scaleout_config):
# the master's data volume and settings. No value: from mac's environment or env files
# at `up` (secrets are never written into the generated file).
ENGINE_ENVIRONMENT: dict[str, str | None] = {
    "MAC_DATA_DIR": str(DOCKER_DATA),
    "MAC_SD_TOKEN": None,
    "MAC_METRICS_TOKEN": None,
    "MAC_SCRAPE_INTERVAL": None,
    "MAC_ALERT_FOR": None,
    "MAC_RUNBOOK_BASE_URL": None,
}
MASTER_SERVICES = ("api-server", "worker", "beat")


def compose_overlay(engines: list[ServiceSpec], overrides: dict[str, str]) -> dict:
    """The Compose file that turns docker-compose.master.yml into scale-out mode: one
    service per engine spec (docker_layout's), the targets view in mac-prometheus's
    place, and the master's services reading the store."""
    services: dict[str, dict] = {}
    for spec in engines:
        if spec.name == "prometheus":
            # Same name, port and front-door route; the view instead of Prometheus.
            services["prometheus"] = {"entrypoint": [], "command": _escaped(spec.argv)}
            continue
        volumes = [f"mac-data:{DOCKER_DATA}"]
        if spec.name == "store":
            volumes.append(f"{STORE_VOLUME}:{DOCKER_STORE_DATA}")
        # The master's api-server makes the secret key settings need: wait for it.
        steps = [f"until [ -s {DOCKER_DATA}/secret_key ]; do sleep 1; done"]
        steps += [shlex.join(step) for step in spec.prestart]
        steps.append(f"exec {shlex.join(spec.argv)}")
        services[spec.name] = {
            "image": "${MAC_IMAGE:-mac:latest}",
            "container_name": f"mac-{spec.name}",
            "restart": "unless-stopped",
            "networks": ["master"],
            "entrypoint": [],
            "environment": dict(ENGINE_ENVIRONMENT),
            "command": ["sh", "-c", _escaped(" && ".join(steps))],
            # The host's loopback only, as mac-prometheus: `mac status master` asks there.
            "ports": [f"127.0.0.1:{spec.port}:{spec.port}"],
            "volumes": volumes,
        }
    for name in MASTER_SERVICES:
        services[name] = {"environment": _escaped(overrides)}
    return {"services": services, "volumes": {STORE_VOLUME: {}}}


def _escaped(value):
    """Compose substitutes `$`: a literal one is `$$`."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [_escaped(item) for item in value]
    return {key: _escaped(item) for key, item in value.items()}


def write_overlay(data: Path, overlay: dict) -> Path:
    """The generated Compose file, kept beside the engines' other files on this host."""
    path = folder(data) / OVERLAY_NAME
    header = (
        "# Written by `mac start master` (maccli.scaleout) for MAC_SCRAPE_SHARDS: Compose\n"
        "# reads it after docker/docker-compose.master.yml. Edits are lost at the next start.\n"
    )
    text = header + yaml.safe_dump(overlay, sort_keys=False, default_flow_style=False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text.encode())
    except OSError as exc:
        raise CliError(
            f"cannot write {path}: {exc}",
            hint="MAC_DATA_DIR must be writable by whoever runs mac:",
            commands=[f"ls -ld {path.parent}"],
        ) from None
    return path


def is_engine(service: str) -> bool:
    return ENGINE_SERVICE.fullmatch(service) is not None


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
