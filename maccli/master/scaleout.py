"""Scale-out mode of `mac start master` (MAC_SCRAPE_SHARDS=N >= 1): its services.

Instead of mac-prometheus the master then runs, from Debian's `victoria-metrics`:

- `store` (victoria-metrics on MAC_METRICS_STORE_PORT): the one store every scraper
  writes to and everything reads (charts, panels, /health, rules), with
  MAC_METRICS_RETENTION; it also scrapes the scrapers (rule MacScraperDown). A site
  store (MAC_METRICS_STORE_URL) replaces it;
- `scraper-K` for K in 0..N-1 (vmagent on MAC_SCRAPER_BASE_PORT + K): shard K of the
  fleet, read from the shard's targets files the sweep writes (scraping.targets), so
  one node's targets share a scraper and a scraper needs nothing of the API;
- `rules` (vmalert on MAC_RULES_PORT): MAC's rule files evaluated once, against the
  store, alerts sent to MAC's Alertmanager;
- `prometheus` keeps its name and port (29090) but is the targets view
  (scraping.targetsview): `/api/v1/targets` merged from every scraper, rules and
  alerts from vmalert, the rest passed to the store, so the guide's
  `curl localhost:29090/api/v1/targets` keeps its meaning; it also serves the pages
  people open at /prometheus/ (targets, rules, alerts).

Both runtimes run the same services from the same specs; a Layout (layout.py) says where. The
process runtime runs them on this host's loopback; the docker runtime runs each in a
container of MAC's image on the master's Compose network, where they reach each other
by service name, from a Compose file written from the specs (compose_overlay) and
given after docker-compose.master.yml. Their ports are published on the host's
127.0.0.1 only, so `mac status master` and `mac backup metrics` work alike.

docs/scaling.md says why these engines and how to move them to other machines.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from contract.atomicfile import write_atomically
from maccli.master.layout import DOCKER_DATA, DOCKER_STORE_DATA, DOCKER_TARGETS, Layout
from maccli.output import CliError
from maccli.runtimes import ServiceSpec
from node.config import NodeConfig

STORE_PORT = 29428
SCRAPER_BASE_PORT = 29430
RULES_PORT = 29480
DEFAULT_RETENTION = "15d"
# Each scraper's on-disk buffer while the store is away (vmagent's
# -remoteWrite.maxDiskUsagePerURL): past it, the oldest buffered samples are dropped.
# vmagent keeps the buffer in files of about 500 MB, the practical floor.
DEFAULT_SCRAPER_BUFFER = "2GiB"
_SIZE = re.compile(r"[1-9][0-9]*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)?")
# The engines' services (the targets view keeps Prometheus's name, `prometheus`).
ENGINE_SERVICE = re.compile(r"store|rules|scraper-\d+")
OVERLAY_NAME = "docker-compose.scaleout.yml"
# The flags set below for cost alone, as (service, flag): bench.scale_metrics measures
# MAC's specs against them dropped (VictoriaMetrics' defaults); docs/benchmarks.md.
COST_FLAGS: tuple[tuple[str, str], ...] = (("scraper", "-promscrape.streamParse"),)
# VictoriaMetrics' programs collect garbage at GOGC=30 unless told otherwise (its
# lib/cgroup), saving memory at the cost of CPU; MAC gives them Go's own default, as
# Prometheus runs. At 500 GPU nodes on a 2-core machine: 1.28 -> 1.11 cores (the store
# 0.64 -> 0.51), 1.3 -> 1.6 GiB; at 1,000, where that machine fell behind, 79,000 ->
# 106,000 samples/s ingested for the same CPU (docs/benchmarks.md, Metrics at scale).
# Not 200: at 1,000 nodes on Debian 13's 1.112 it used 0.58 cores against 0.72, within
# the host's drift in those runs, for 6.3 GiB against 3.8 (GOGC=200 at 1,000 nodes).
ENGINE_GOGC = "100"
COST_ENV: tuple[tuple[str, str], ...] = tuple(
    (service, "GOGC") for service in ("store", "scraper", "rules")
)


STORE_VOLUME = "mac-metrics"  # Compose names it mac_mac-metrics (project mac)


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


def scraper_buffer(cfg: NodeConfig) -> str:
    """MAC_SCRAPER_BUFFER_BYTES: the most each scraper buffers on disk for the store."""
    size = (cfg.get("MAC_SCRAPER_BUFFER_BYTES") or DEFAULT_SCRAPER_BUFFER).strip()
    if not _SIZE.fullmatch(size):
        raise CliError(
            f"MAC_SCRAPER_BUFFER_BYTES={size} is not a size: bytes, or a number with "
            "KB, MB, GB, KiB, MiB or GiB (vmagent's -remoteWrite.maxDiskUsagePerURL).",
            commands=[f"mac env set MAC_SCRAPER_BUFFER_BYTES={DEFAULT_SCRAPER_BUFFER}"],
        )
    return size


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


def _kept_secret(path: Path) -> str:
    """The secret in `path`, made there once (random, mode 0600, written atomically) and
    kept across restarts. Raises OSError when the folder cannot keep it."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomically(path, secrets.token_urlsafe(32).encode(), mode=0o600)
    return path.read_text().strip()


def kept_sd_token(data: Path) -> str:
    """The http_sd token an earlier release made for this master in scale-out mode, where
    MAC_SD_TOKEN is not set: scrapers on other hosts may still send it, so the API keeps
    taking it (a new master makes none; http_sd then takes the metrics token)."""
    try:
        return (folder(data) / "sd_token").read_text().strip()
    except OSError:
        return ""


# The store's endpoints that change it or show its settings, each closed by a key of
# its own (victoria-metrics' -*AuthKey flags): series deletion, snapshots, merges and
# flushes, the query cache's reset, its configuration, flags and profiler. Its
# ingestion (/api/v1/write, /api/v1/import...) has no key: the scrapers and vmalert
# write there, so the store listens on loopback (or the Compose network) only, and the
# front door's gate passes reads alone (macweb.monitoring_gate).
STORE_KEY_FLAGS = (
    "deleteAuthKey", "snapshotAuthKey", "forceMergeAuthKey", "forceFlushAuthKey",
    "search.resetCacheAuthKey", "configAuthKey", "flagsAuthKey", "pprofAuthKey",
)  # fmt: skip
# The engines read these flags from their environment (-envflag.enable), never from
# their command line, which every local user can read in `ps`.
ENVFLAG_PREFIX = "MAC_VM_"
ENVFLAG_ARGS = ["-envflag.enable", f"-envflag.prefix={ENVFLAG_PREFIX}"]


def envflag_variable(flag: str) -> str:
    """The environment variable a VictoriaMetrics program reads `flag` from."""
    return ENVFLAG_PREFIX + flag.replace(".", "_")


# How far behind now the store answers queries (its -search.latencyOffset).
STORE_LATENCY = "5s"
# vmalert from 1.94 on (Debian 13's 1.112) asks for every rule's answer as of
# -rule.evalDelay ago, 30 s by default, to match the store's default latency: with the
# store's 5 s, each alert came about 25 s late (MacScraperDown 37 s after the scraper
# stopped against 13 s on 1.79, whose vmalert has no such flag; tests/maccli/
# test_scaleout.py). From the environment, where 1.79 ignores it: a flag on its
# command line would stop it ("flag provided but not defined").
RULES_ENVIRONMENT = {envflag_variable("rule.evalDelay"): STORE_LATENCY}


def store_key_file(work: Path, flag: str) -> Path:
    """Where this master keeps the store's key for `flag` (work: folder(MAC_DATA_DIR))."""
    return work / "store-keys" / flag


def store_keys(work: Path) -> dict[str, str]:
    """{environment variable: key} of the store's keys, made once for this master and
    kept in 0600 files under $MAC_DATA_DIR/scaleout/store-keys/ on this host (`mac
    backup metrics` reads the snapshot key there)."""
    keys = {}
    for flag in STORE_KEY_FLAGS:
        path = store_key_file(work, flag)
        try:
            keys[envflag_variable(flag)] = _kept_secret(path)
        except OSError as exc:
            raise CliError(
                f"cannot keep the metrics store's key in {path}: {exc}",
                hint="MAC_DATA_DIR must be writable by whoever runs mac:",
                commands=[f"ls -ld {path.parent}"],
            ) from None
    return keys


def env_overrides(cfg: NodeConfig, layout: Layout) -> dict[str, str]:
    """What every master process must agree on in scale-out mode (the sweep writes each
    scraper's targets files for MAC_SCRAPE_SHARDS of them).

    MAC_PROMETHEUS_URL (queries) is the store; MAC_TARGETS_URL (who scrapes what, and
    each target's health) is the merged targets view on 29090.
    """
    return {
        "MAC_SCRAPE_SHARDS": str(shards(cfg)),
        "MAC_PROMETHEUS_URL": store_url(cfg, layout),
        "MAC_TARGETS_URL": f"http://{layout.host('prometheus')}:{layout.views_port}",
        "MAC_SCRAPER_URLS": ",".join(f"http://{a}" for a in scraper_addresses(cfg, layout)),
        "MAC_RULES_URL": f"http://{layout.host('rules')}:{_rules_port(cfg)}",
    }


def _rules_port(cfg: NodeConfig) -> int:
    return cfg.int_value("MAC_RULES_PORT", RULES_PORT)


# The engines' programs a site may replace with a newer VictoriaMetrics release's.
ENGINE_PROGRAMS = {
    "MAC_VICTORIA_METRICS_BIN": "victoria-metrics",
    "MAC_VMAGENT_BIN": "vmagent",
    "MAC_VMALERT_BIN": "vmalert",
    "MAC_VMBACKUP_BIN": "vmbackup",
    "MAC_VMRESTORE_BIN": "vmrestore",
}


def binary(cfg: NodeConfig, layout: Layout, setting: str, name: str) -> str:
    """The engine's program: Debian's (MAC's image's, under Docker), or MAC_*_BIN, a
    program of this host's, which a container runs from a read-only mount at the same
    path (host_programs): Debian 13's 1.112 on a Debian 12 master, say (docs/scaling.md)."""
    chosen = cfg.get(setting)
    return str(Path(chosen)) if chosen else f"/usr/bin/{name}"


def host_program(cfg: NodeConfig, setting: str) -> str:
    """The program a MAC_*_BIN that is set names, as binary() writes it. CliError for
    one that is not an executable file here: a container would fail with a less clear
    word, after the start."""
    path = cfg.get(setting) or ""
    program = Path(path)
    if not (program.is_absolute() and program.is_file() and os.access(program, os.X_OK)):
        raise CliError(
            f"{setting}={path} is not an executable file on this host: under Docker "
            "the engine's container runs it from a read-only mount at the same path.",
            hint="Give the program's absolute path, or leave the setting out for the image's own:",
            commands=[f"ls -l {path}", f"mac env unset {setting}"],
        )
    return str(program)


def host_programs(cfg: NodeConfig) -> list[str]:
    """The MAC_*_BIN programs of this host the engines' containers mount (host_program)."""
    return [host_program(cfg, setting) for setting in ENGINE_PROGRAMS if cfg.get(setting)]


def specs(
    cfg: NodeConfig,
    layout: Layout,
    env: dict[str, str],
    *,
    views_port: int,
    project_spec: Callable[..., ServiceSpec],
) -> list[ServiceSpec]:
    """The scale-out services, in place of mac-prometheus (see the module docstring)."""
    django = layout.django
    work = layout.work
    store = store_url(cfg, layout)
    scrapers = scraper_addresses(cfg, layout)
    interval = cfg.get("MAC_SCRAPE_INTERVAL") or "15s"
    # Validated by the catalogue (a number of seconds from 0.5): `10s` or nan is refused.
    sd_check = f"{max(1, round(cfg.value('MAC_PROBE_INTERVAL')))}s"
    buffer = scraper_buffer(cfg)
    result: list[ServiceSpec] = []
    if not cfg.get("MAC_METRICS_STORE_URL"):
        port = _store_port(cfg)
        store_scrape = work / "store-scrape.yml"
        argv = [
            binary(cfg, layout, "MAC_VICTORIA_METRICS_BIN", "victoria-metrics"),
            # The data on the master's data volume (`mac backup metrics` snapshots it).
            f"-storageDataPath={layout.store_data}",
            # Loopback (or the Compose network) only: its ingestion has no key.
            f"-httpListenAddr={layout.listen}:{port}",
            # MAC_METRICS_RETENTION, default 15d as Prometheus's.
            f"-retentionPeriod={cfg.get('MAC_METRICS_RETENTION') or DEFAULT_RETENTION}",
            # It scrapes the scrapers itself, so a dead one shows (rule MacScraperDown).
            f"-promscrape.config={store_scrape}",
            # Charts and rules see a sample a few seconds after it is scraped (the
            # store's default holds back the last 30 s).
            f"-search.latencyOffset={STORE_LATENCY}",
            # Its keys (STORE_KEY_FLAGS) from the environment.
            *ENVFLAG_ARGS,
        ]
        prestart = [
            django("scaleout_config", "--store-scrape", str(store_scrape),
                   "--scrapers", ",".join(scrapers)),
        ]  # fmt: skip
        # Under Docker the keys come through Compose's environment (compose_overlay).
        keys = {} if layout.docker else store_keys(work)
        result.append(_engine_spec("store", argv, port, {**env, **keys}, prestart))
    for index in range(len(scrapers)):
        port = _scraper_port(cfg, index)
        config = work / f"scraper-{index}.yml"
        argv = [
            binary(cfg, layout, "MAC_VMAGENT_BIN", "vmagent"),
            # Shard K's jobs, written by the prestart from MAC's Prometheus configuration.
            f"-promscrape.config={config}",
            # Everything scraped goes to the one store (or the site's).
            f"-remoteWrite.url={store}/api/v1/write",
            # While the store is away, samples wait on disk and are sent later, up to a
            # bound (the oldest go first past it: docs/scaling.md says how long it lasts).
            f"-remoteWrite.tmpDataPath={work / f'scraper-{index}-buffer'}",
            f"-remoteWrite.maxDiskUsagePerURL={buffer}",
            # Its /metrics (scraped by the store), /health and /api/v1/targets (the view).
            f"-httpListenAddr={layout.listen}:{port}",
            # Its shard's targets files, written by the sweep: they change at most once
            # per sweep, so look for changes as often (the default is every 5 minutes).
            f"-promscrape.fileSDCheckInterval={sd_check}",
            # Parse each page as it arrives instead of whole: at 1,000 GPU nodes on a quiet
            # 2-core machine it held every scrape where the default missed 1,893 of
            # 16,000, for 0.3 GiB more (docs/benchmarks.md, Metrics at scale).
            "-promscrape.streamParse",
        ]
        prestart = [
            django("scaleout_config", "--scraper", str(index), "--of", str(len(scrapers)),
                   "--master", layout.master, "--out", str(config)),
        ]  # fmt: skip
        result.append(_engine_spec(f"scraper-{index}", argv, port, env, prestart))
    rules_port = _rules_port(cfg)
    rules = work / "rules"
    result.append(
        _engine_spec(
            "rules",
            [
                binary(cfg, layout, "MAC_VMALERT_BIN", "vmalert"),
                # MAC's rules as Prometheus would load them (increase() and the like in
                # PromQL's meaning, not MetricsQL's), and scale-out mode's own.
                f"-rule={rules / 'alerts.yml'}",
                f"-rule={rules / 'scaleout.yml'}",
                # The rules query the store, where every scraper writes.
                f"-datasource.url={store}",
                # MAC's Alertmanager (or the site's), as mac-prometheus's alerting.
                f"-notifier.url={layout.alertmanager_url}",
                # Alerts keep Prometheus's labels (vmalert would add `alertgroup`), so the
                # master's own MacNodeOffline post and the rule's are one alert to
                # Alertmanager: one notification per incident.
                "-disableAlertgroupLabel",
                # ALERTS series into the store, and read back to keep `for:` across restarts.
                f"-remoteWrite.url={store}",
                f"-remoteRead.url={store}",
                # As often as Prometheus evaluates them (its evaluation_interval, the
                # scrape interval), so `for:` and alert latency are the same.
                f"-evaluationInterval={interval}",
                # /api/v1/rules and /api/v1/alerts for the targets view, /health.
                f"-httpListenAddr={layout.listen}:{rules_port}",
                # RULES_ENVIRONMENT's flag from the environment.
                *ENVFLAG_ARGS,
            ],
            rules_port,
            {**env, **RULES_ENVIRONMENT},
            [django("scaleout_config", "--rules", str(rules))],
        )
    )
    view_argv = [
        layout.python, "-m", "scraping.targetsview",
        "--listen", f"{layout.listen}:{layout.views_port}", "--store", store,
        "--rules", f"http://{layout.host('rules')}:{rules_port}",
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
        name, argv, port=port, liveness_path="/health", env={**env, "GOGC": ENGINE_GOGC},
        prestart=prestart, ready_timeout=60, host="127.0.0.1", bind="127.0.0.1",
    )  # fmt: skip


def store_data(data: Path) -> Path:
    return folder(data) / "store"


# What the engines' containers need to write their files (manage.py scaleout_config):
# the master's data volume and settings. No value: from mac's environment or env files
# at `up` (secrets are never written into the generated file).
ENGINE_ENVIRONMENT: dict[str, str | None] = {
    "GOGC": ENGINE_GOGC,  # see COST_ENV
    "MAC_DATA_DIR": str(DOCKER_DATA),
    # The sweep's targets files: each scraper reads its shard's (scraping.targets).
    "MAC_SD_DIR": str(DOCKER_TARGETS),
    "MAC_METRICS_TOKEN": None,
    "MAC_SCRAPE_INTERVAL": None,
    "MAC_ALERT_FOR": None,
    "MAC_RUNBOOK_BASE_URL": None,
}
# The proxy too: its nginx.conf differs in scale-out mode (macweb.proxy, classic_ui).
MASTER_SERVICES = ("api-server", "worker", "beat", "proxy")


def _own_environment(service: str) -> dict[str, str | None]:
    """An engine's own variables: the store's keys, passed through from mac's
    environment (store_keys), and vmalert's RULES_ENVIRONMENT."""
    if service == "rules":
        return dict(RULES_ENVIRONMENT)
    if service != "store":
        return {}
    return dict.fromkeys((envflag_variable(flag) for flag in STORE_KEY_FLAGS), None)


def _keys_given() -> str:
    """A shell test that stops the store's container when Compose gave it no keys (a
    `docker compose up` by hand, without `mac`): an empty key would leave its endpoint open."""
    given = " && ".join(f'[ -n "${envflag_variable(f)}" ]' for f in STORE_KEY_FLAGS)
    why = "mac-store: its keys are missing from the environment; start it with: mac start master"
    return f"{{ {given}; }} || {{ echo {shlex.quote(why)} >&2; exit 1; }}"


def compose_overlay(
    engines: list[ServiceSpec], overrides: dict[str, str], programs: Sequence[str] = ()
) -> dict:
    """The Compose file that turns docker-compose.master.yml into scale-out mode: one
    service per engine spec (docker_layout's), the targets view in mac-prometheus's
    place, and the master's services reading the store. `programs`: the host's own
    engine programs (host_programs), each mounted read-only where an engine runs it."""
    services: dict[str, dict] = {}
    for spec in engines:
        if spec.name == "prometheus":
            # Same name, port and front-door route; the view instead of Prometheus.
            services["prometheus"] = {"entrypoint": [], "command": _escaped(spec.argv)}
            continue
        volumes = [f"mac-data:{DOCKER_DATA}"]
        if spec.name.startswith("scraper-"):
            # The sweep's targets files (the worker writes them): its shard's are read.
            volumes.append(f"mac-targets:{DOCKER_TARGETS}")
        if spec.name == "store":
            volumes.append(f"{STORE_VOLUME}:{DOCKER_STORE_DATA}")
        if spec.argv[0] in programs:
            volumes.append(f"{spec.argv[0]}:{spec.argv[0]}:ro")
        # The master's api-server makes the secret key settings need: wait for it.
        steps = [f"until [ -s {DOCKER_DATA}/secret_key ]; do sleep 1; done"]
        if spec.name == "store":
            steps.append(_keys_given())
        steps += [shlex.join(step) for step in spec.prestart]
        steps.append(f"exec {shlex.join(spec.argv)}")
        services[spec.name] = {
            "image": "${MAC_IMAGE:-mac:latest}",
            "container_name": f"mac-{spec.name}",
            "restart": "unless-stopped",
            "networks": ["master"],
            "entrypoint": [],
            "environment": {**ENGINE_ENVIRONMENT, **_own_environment(spec.name)},
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
        "# Written by `mac start master` (maccli.master.scaleout) for MAC_SCRAPE_SHARDS: Compose\n"
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
