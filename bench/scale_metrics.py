"""Metrics at scale: the largest GPU fleet one Prometheus, and MAC's scale-out path, hold.

What runs, all real processes on loopback, every engine started from the specs
`mac start master` starts (maccli.master.specs.master_specs, with their prestart commands
writing their configuration, rules and keys), never from command lines of our own:

- the fleet: ``python -m testkit.simfleet --nodes N --profiles nvidia=1
  --collect-interval 15`` (8 GPUs' dcgm-exporter page, the RDMA NICs' nic-exporter
  page, sys-exporter; each page collected once per scrape interval and gzipped once
  when asked, as a real exporter does) plus ``python -m bench.hostpages`` (node_exporter's
  captured output, HOST_SERIES series per node), about 2,000 series per node;
- the targets files the sweep would write (scraping.targets.target_groups for the
  fleet as if registered: sys-exporter, dcgm-exporter, nic-exporter), whole for
  Prometheus and each scraper's shard for the store path, and a stand-in for the
  master's /metrics (this process); the host pages are one more job with the same
  labels (MAC's configuration plus that job, appended to the file the prestart wrote);
- engine ``prometheus`` (MAC_SCRAPE_SHARDS=0): mac-prometheus with MAC's rules;
- engine ``vm`` (MAC_SCRAPE_SHARDS=--shards): the store (victoria-metrics), the
  scraper(s) (vmagent), the rules (vmalert with MAC's rules) and the targets view.

For each engine, tuning and fleet size: start fresh, wait WARMUP, then until the engine
ingests at the scrape rate (series / interval, within SETTLE_SLACK, at most SETTLE_LIMIT
seconds more: a fresh store registers the fleet's series while its scraper buffers, then
takes the backlog at about twice the rate, and a window over that catch-up measured
twice the work), then over WINDOW seconds measure every process's CPU (user+system per
wall second, children included) and RSS, apart: each engine process, the fleet's two
servers, and this process (the master's stand-in). The engine's figure is the sum of what
MAC starts for it, the fleet's never counted in it. Also the engine's counters (active
series, ingested samples per second), the machine's load average and busy share, the
scrapes (the raw `up` samples of every exporter target over the window: a gap longer
than 1.5 intervals is a missed scrape, up=0 a failed one; a size is *held* with none of
either), the CPU seconds the targets view spends answering one merged /api/v1/targets,
vmalert's own time per evaluation round, what the scrapers hold queued for the store
(vmagent's queue: a store behind its scrapers), and the node chart latency (every query
of every chart of macweb.dashboard.charts for one node, QUERY_ROUNDS rounds, over 1 h
and, on the store, over 24 h once bench.day_history gave DAY_NODES nodes the day before
their first scrape by the store's import API).

`--tuning NAME=EDIT ...` (repeatable) adds a flag set measured beside MAC's own
("mac", as the specs have it) in the same run; `defaults` is a built-in one: MAC's
specs without the flags and environment it sets for cost (maccli.master.scaleout's
COST_FLAGS and COST_ENV), i.e. VictoriaMetrics' defaults; `store-scrapes` is another: the
store scrapes the fleet itself (scraper 0's configuration, stream parsing on) and the
vmagent is left idle, which measures what the remote-write hop between them costs (MAC
keeps the hop: vmagent buffers on disk what it scrapes while the store is away);
`norules` runs vmalert with no rule at all (bench/no_rules.yml), which measures what MAC's
rules cost the store (vmalert's -evaluationInterval would leave the groups that have an
interval of their own running); `bare-targets` gives every target only its job and
instance (none of MAC's node labels), on both engines, which measures what the label
bytes MAC adds to every sample cost each engine (the node page's charts select by those
labels, so that tuning's chart figures are not measured). An EDIT is
SERVICE:-flag=value (set or replace), SERVICE:-flag (a boolean), SERVICE:!-flag (drop)
or SERVICE:NAME=value (environment, e.g. GOGC=30); SERVICE is scraper, store, rules,
prometheus or fleet (the simfleet's options, e.g. fleet:--collect-interval=0). Several
EDITs of one tuning are separated by spaces; the word `store-scrapes` among them makes
that tuning's store scrape too (its other edits then tune the store's scraping).

`--debian RELEASE` runs both engines as another Debian release packages them (trixie:
Prometheus 2.53, VictoriaMetrics 1.112, where this host has 2.42 and 1.79), unpacked
beside the host's by testkit.debian_release; each row names the engine's version and the
report the packages it ran (Sample.programs).

    nice -n 10 .venv/bin/python -m bench.scale_metrics --sizes 50 --runs 1 --warmup 20 --window 30
    flock /tmp/mac-bench.lock .venv/bin/python -m bench.scale_metrics --sizes 500,1000,1500,2000 \\
        --runs 3 --write
    ... --engines vm --sizes 1000 --tuning defaults --tuning 'queues1=scraper:-remoteWrite.queues=1'
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.day_history import DAY_NODES, chart_metrics, load_day
from bench.hostpages import HOST_PORT, HOST_SERIES
from bench.report import median, percentile, update_section
from contract.services import BY_NAME
from testkit.debian_release import fetch, mac_settings, program_version, upstream
from testkit.ports import free_port
from testkit.simfleet.fleet import hostname_for, node_addresses

BASE = "127.40.0.0"
INTERVAL = 15
WARMUP = 45.0
WINDOW = 120.0
SETTLE_SLACK = 1.15  # ingest within this factor of series / interval is settled
SETTLE_LIMIT = 300.0
QUERY_ROUNDS = 3
PROJECTED_NODES = 12_500
MEMORY_SHARE = 0.7  # of the available memory a size may take (the fleet needs the rest)
EXPORTERS = ("sys-exporter", "dcgm-exporter", "nic-exporter")
HOST_JOB = "host-capture"  # the node_exporter-sized pages (bench.hostpages)
JOBS = (*EXPORTERS, HOST_JOB)
# What each engine process is called in the tables (the spec's name otherwise).
SHOWN = {"store": "store (victoria-metrics)", "rules": "rules (vmalert)"}
FLEET = ("fleet: simfleet", "fleet: host pages", "bench: master stand-in")


@dataclass
class Sample:
    engine: str
    tuning: str
    nodes: int
    targets: int
    missed: int
    failed: int
    series: float
    samples_per_s: float
    # {process: (CPU cores, RSS bytes)}: the engine's processes, then FLEET's.
    procs: dict[str, tuple[float, float]]
    machine_busy: float  # the whole machine's CPU use during the window, 0..1
    load: tuple[float, float, float]  # the load average at the window's end
    chart_ms: list[float] = field(default_factory=list)  # the node page's 1 h charts
    view_call_cpu_s: float | None = None  # targets view: CPU s of one /api/v1/targets
    rules_round_s: float | None = None  # vmalert: seconds per round of its slowest group
    settled_s: float = 0.0  # past the warm-up, until ingest ran at the scrape rate
    # The 24 h charts, once DAY_NODES nodes were given a day of history (the store only).
    chart_day_ms: list[float] = field(default_factory=list)
    day_samples: int = 0  # imported for that day
    day_import_s: float | None = None  # exported, made, imported and searchable
    # What the scrapers hold for the store at the window's end (vmagent's queue): a store
    # that falls behind shows here, while its missing samples show as missed scrapes.
    backlog_bytes: float | None = None
    # {process: its package and version}, e.g. "prometheus 2.42.0+ds-5+deb12u1 (this host's)"
    programs: dict[str, str] = field(default_factory=dict)
    rules_group: str = ""  # vmalert's slowest group (rules_round_s)

    @property
    def held(self) -> bool:
        return self.missed == 0 and self.failed == 0

    @property
    def engine_procs(self) -> dict[str, tuple[float, float]]:
        return {name: v for name, v in self.procs.items() if name not in FLEET}

    @property
    def cpu_cores(self) -> float:
        return sum(cpu for cpu, _ in self.engine_procs.values())

    @property
    def rss_bytes(self) -> float:
        return sum(rss for _, rss in self.engine_procs.values())

    @property
    def fleet_cores(self) -> float:
        return sum(self.procs.get(name, (0.0, 0.0))[0] for name in FLEET)


def http_get(url: str, timeout: float = 30, tries: int = 30) -> bytes:
    """The body at `url`; a 503 (the store's query queue full while the shared machine is
    busy) is asked again, 2 s apart."""
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as answer:
                return answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or attempt == tries - 1:
                why = exc.read()[:300].decode(errors="replace")
                raise RuntimeError(f"{url.split('?')[0]}: HTTP {exc.code} {why}") from None
            time.sleep(2)
        except urllib.error.URLError as exc:
            # Which server refused: an OSError still, for wait_http's retries.
            raise ConnectionError(f"{url.split('?')[0]}: {exc.reason}") from None
    raise AssertionError("unreachable")


def wait_http(url: str, proc: subprocess.Popen, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            http_get(url, timeout=2)
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}") from None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def counter(url: str, name: str) -> float:
    """Sum of every sample of metric family `name` on a /metrics page."""
    total = 0.0
    for family in text_string_to_metric_families(http_get(url).decode()):
        for sample in family.samples:
            if sample.name in (name, f"{name}_total") and family.name in (name, name[:-6]):
                total += sample.value
    return total


# -- the fleet as registered, and the master's /metrics -----------------------------------


def fleet_rows(nodes: int) -> list[dict]:
    """The fleet as the inventory would hold it, for scraping.targets.target_groups."""
    from inventory.choices import NodeStatus

    reported = ["dcgm-exporter", "nic-exporter"]
    return [
        {
            "id": index + 1, "hostname": hostname_for(ip), "ip": ip, "gpu_vendor": "nvidia",
            "maintenance": False, "status": NodeStatus.ONLINE, "exporters": reported,
            "exporter_health": dict.fromkeys(reported, True),
        }
        for index, ip in enumerate(node_addresses(nodes, BASE))
    ]  # fmt: skip


def job_groups(rows: list[dict], bare: bool = False) -> dict[str, list[tuple[int, str]]]:
    """{job: [(node id, target group JSON)]}: MAC's groups, and the host pages' job with
    the labels of the node's sys-exporter target; `bare`: the groups without labels (the
    engine then adds only job and instance)."""
    from scraping.targets import target_groups

    groups = target_groups(rows, EXPORTERS)
    ids = [row["id"] for row in sorted(rows, key=lambda row: row["id"])]
    out = {job: list(zip(ids, lines, strict=True)) for job, lines in groups.items()}
    sys_port = f':{BY_NAME["sys-exporter"].port}"'
    out[HOST_JOB] = [(i, line.replace(sys_port, f':{HOST_PORT}"')) for i, line in out[EXPORTERS[0]]]
    if bare:
        return {
            job: [(i, json.dumps({"labels": {}, "targets": json.loads(line)["targets"]}))
                  for i, line in lines]
            for job, lines in out.items()
        }  # fmt: skip
    return out


class MasterStandIn:
    """The master's /metrics (shard 0 and Prometheus scrape it), on loopback, in a thread
    of this process."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body, kind = b"mac_bench_master_up 1\n", "text/plain; version=0.0.4"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- tunings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    service: str  # scraper, store, rules, prometheus, fleet
    action: str  # set, drop, env
    name: str  # -flag (set/drop) or NAME (env)
    value: str | None = None


def parse_tuning(text: str) -> tuple[str, list[Edit]]:
    """NAME=EDIT EDIT... (see the module docstring) -> (name, edits)."""
    name, _, rest = text.partition("=")
    if not name or not rest.strip():
        raise ValueError(f"--tuning {text!r}: give NAME=SERVICE:-flag=value ...")
    edits = []
    for item in rest.split():
        if item == STORE_SCRAPES:  # with other edits: e.g. the store's own scrape flags
            edits.append(Edit("store", "scrapes", STORE_SCRAPES))
            continue
        service, _, what = item.partition(":")
        if service not in ("scraper", "store", "rules", "prometheus", "fleet") or not what:
            raise ValueError(f"--tuning {name}: {item!r} is not SERVICE:EDIT")
        if what.startswith("!-"):
            edits.append(Edit(service, "drop", what[1:]))
        elif what.startswith("-"):
            flag, eq, value = what.partition("=")
            edits.append(Edit(service, "set", flag, value if eq else None))
        else:
            var, eq, value = what.partition("=")
            if not eq:
                raise ValueError(f"--tuning {name}: {item!r} is neither a flag nor NAME=value")
            edits.append(Edit(service, "env", var, value))
    return name, edits


# Built-in tuning `store-scrapes`: the engine swaps the scrapers' job over to the store.
STORE_SCRAPES = "store-scrapes"
# Built-in tuning `norules`: vmalert loads no rule.
NO_RULES = "norules"
# Built-in tuning `bare-targets`: targets without MAC's labels, on both engines.
BARE_TARGETS = "bare-targets"


def builtin_tuning(name: str) -> list[Edit]:
    """`mac` (no edit), `defaults` (MAC's cost flags dropped), `store-scrapes` (the
    store scrapes the fleet; Engine makes the edits, which name its files), `norules`
    (vmalert without rules) or `bare-targets` (targets without MAC's labels)."""
    if name in ("mac", STORE_SCRAPES):
        return []
    if name == NO_RULES:
        return [Edit("rules", "set", "-rule", str(Path(__file__).with_name("no_rules.yml")))]
    if name == BARE_TARGETS:
        return [Edit("targets", "bare", BARE_TARGETS)]
    if name == "defaults":
        from maccli.master.scaleout import COST_ENV, COST_FLAGS

        # An empty GOGC is an unset one to VictoriaMetrics (it then takes its own 30).
        return [Edit(service, "drop", flag) for service, flag in COST_FLAGS] + [
            Edit(service, "env", name, "") for service, name in COST_ENV
        ]
    raise ValueError(
        f"--tuning {name}: not built in (mac, defaults, {STORE_SCRAPES}, {NO_RULES}, "
        f"{BARE_TARGETS}); "
        "give NAME=EDIT ..."
    )


def scrapes_in_store(tuning: tuple[str, list[Edit]]) -> bool:
    """Whether the tuning is, or includes, `store-scrapes`."""
    return tuning[0] == STORE_SCRAPES or any(e.action == "scrapes" for e in tuning[1])


def bare_targets(tuning: tuple[str, list[Edit]]) -> bool:
    """Whether the tuning's targets carry no MAC label (`bare-targets`)."""
    return any(e.action == "bare" for e in tuning[1])


def for_prometheus(tuning: tuple[str, list[Edit]]) -> bool:
    """Whether the tuning changes anything Prometheus runs (else only engine vm runs it)."""
    return tuning[0] == "mac" or any(e.service in ("prometheus", "targets") for e in tuning[1])


def applies(edit: Edit, service: str) -> bool:
    return edit.service == service or (edit.service == "scraper" and service.startswith("scraper-"))


def edited(argv: list[str], env: dict[str, str], edits: list[Edit], service: str):
    """(argv, env) of `service` with the tuning's edits applied."""
    argv, env = list(argv), dict(env)
    for edit in (e for e in edits if applies(e, service)):
        if edit.action == "scrapes":  # Engine's own edits say it
            continue
        if edit.action == "env":
            env[edit.name] = edit.value or ""
            continue
        argv = [a for a in argv if a != edit.name and not a.startswith(edit.name + "=")]
        if edit.action == "set":
            argv.append(edit.name if edit.value is None else f"{edit.name}={edit.value}")
    return argv, env


# -- the engines as MAC starts them -------------------------------------------------------


def consecutive_ports(count: int) -> int:
    """A port p with p..p+count-1 free (the scrapers' MAC_SCRAPER_BASE_PORT + K)."""
    import socket

    for _ in range(50):
        base = free_port()
        try:
            for port in range(base, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {count} free consecutive ports")


class Engine:
    """The processes `mac start master` starts for one engine, from its specs."""

    def __init__(
        self,
        key: str,
        shards: int,
        work: Path,
        master_port: int,
        edits: list[Edit],
        store_scrapes: bool = False,
    ):
        from maccli.master.specs import master_specs
        from node.config import NodeConfig

        self.key, self.work, self.edits = key, work, edits
        self.shards = shards if key == "vm" else 0
        self.name = "prometheus" if key == "prometheus" else f"vm ({self.shards} scraper)"
        self.sd_dir = work / "sd"
        environ = {
            **os.environ,
            "MAC_DATA_DIR": str(work / "data"),
            "MAC_SD_DIR": str(self.sd_dir),
            "MAC_SCRAPE_SHARDS": str(self.shards),
            "MAC_SCRAPE_INTERVAL": f"{INTERVAL}s",
            "MAC_MASTER_BIND": "127.0.0.1",
            # The master's /metrics: this process's stand-in.
            "MAC_MASTER_PORT": str(master_port),
            "MAC_TLS_PORT": str(master_port),
            "MAC_ALERTMANAGER_URL": f"http://127.0.0.1:{free_port()}",
            "MAC_PROMETHEUS_PORT": str(free_port()),
            "MAC_METRICS_STORE_PORT": str(free_port()),
            "MAC_RULES_PORT": str(free_port()),
            "MAC_SCRAPER_BASE_PORT": str(consecutive_ports(max(1, self.shards))),
            "MAC_NODE_ENV_FILE": str(work / "none.env"),
            "MAC_USER_ENV_FILE": str(work / "none-user.env"),
        }
        self.specs = master_specs(NodeConfig(environ=environ))
        by_name = {spec.name: spec for spec in self.specs}
        self.base_env = environ
        # What every master process runs first (the secret key), and the CA the Prometheus
        # configuration names (the proxy's prepare_tls).
        self.first = [by_name["api-server"].prestart[0], by_name["proxy"].prestart[0]]
        wanted = ["prometheus"]
        if self.shards:
            wanted = ["store", *(f"scraper-{k}" for k in range(self.shards)), "rules", "prometheus"]
        self.engine_specs = [by_name[name] for name in wanted]
        # Which Debian package each engine program came from (--debian swaps them): the
        # rows say the upstream version, the report the whole package version.
        versions = {
            spec.name: program_version(spec.argv[0])
            for spec in self.engine_specs
            if not Path(spec.argv[0]).name.startswith("python")
        }
        self.programs = {self.shown(name): version for name, version in versions.items()}
        main_program = versions.get("store" if self.shards else "prometheus", "")
        if main_program:
            version = upstream(main_program.split()[1])
            self.name = (
                f"prometheus {version}" if key == "prometheus" else
                f"vm {version} ({self.shards} scraper)"
            )  # fmt: skip
        if store_scrapes and self.shards == 1:
            self._store_scrapes(by_name)
        self.procs: dict[str, subprocess.Popen] = {}
        self.scraper_urls: list[str] = []

    def _store_scrapes(self, by_name: dict) -> None:
        """The store takes scraper 0's configuration (written by that scraper's prestart,
        so the scraper goes first), the scraper keeps none and only idles."""
        scraper = by_name["scraper-0"]
        config = next(a for a in scraper.argv if a.startswith("-promscrape.config="))
        self.engine_specs = [scraper, *(s for s in self.engine_specs if s is not scraper)]
        self.edits = [
            *self.edits,
            Edit("store", "set", "-promscrape.config", config.split("=", 1)[1]),
            Edit("store", "set", "-promscrape.streamParse"),
            Edit("scraper", "drop", "-promscrape.config"),
        ]

    def shown(self, spec_name: str) -> str:
        if spec_name == "prometheus":
            return "targets view" if self.shards else "prometheus"
        return SHOWN.get(spec_name, spec_name)

    def _run(self, argv: list[str], env: dict[str, str]) -> None:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")

    def start(self, groups: dict[str, list[tuple[int, str]]]) -> None:
        from scraping.targets import dump_groups, shard_folder, shard_of

        env0 = {**self.base_env, **self.engine_specs[0].env}
        for argv in self.first:
            self._run(argv, env0)
        for spec in self.engine_specs:
            env = {**self.base_env, **spec.env}
            for argv in spec.prestart:
                self._run(argv, env)
            # What the sweep writes, whole and each share (after the prestart, which
            # writes the shares from an inventory the bench does not fill).
            self.sd_dir.mkdir(parents=True, exist_ok=True)
            for job, lines in groups.items():
                all_lines = [line for _, line in lines]
                (self.sd_dir / f"{job}.json").write_bytes(dump_groups(all_lines))
                for shard in range(self.shards):
                    folder = shard_folder(self.sd_dir, shard, self.shards)
                    folder.mkdir(parents=True, exist_ok=True)
                    mine = [line for i, line in lines if shard_of(i, self.shards) == shard]
                    (folder / f"{job}.json").write_bytes(dump_groups(mine))
            self._add_host_job(spec)
            argv, env = edited(spec.argv, env, self.edits, spec.name)
            log = (self.work / f"{spec.name}.log").open("w")
            proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
            self.procs[self.shown(spec.name)] = proc
            wait_http(spec.liveness_url, proc)
            if spec.name == "store":
                self.query_url = f"http://127.0.0.1:{spec.port}"
                self.store_env = env
            elif spec.name == "rules":
                self.rules_url = f"http://127.0.0.1:{spec.port}"
            elif spec.name.startswith("scraper-"):
                self.scraper_urls.append(f"http://127.0.0.1:{spec.port}")
            elif spec.name == "prometheus":
                self.view_url = f"http://127.0.0.1:{spec.port}"
                if not self.shards:
                    self.query_url = self.view_url

    def _add_host_job(self, spec) -> None:
        """The host pages' job beside MAC's, in the configuration the prestart wrote."""
        config_flag = next((a for a in spec.argv if a.startswith(("-promscrape.config=",
                            "--config.file="))), None)  # fmt: skip
        if config_flag is None or spec.name == "store":
            return
        path = Path(config_flag.split("=", 1)[1])
        config = yaml.safe_load(path.read_text())
        template = next(j for j in config["scrape_configs"] if j["job_name"] == EXPORTERS[0])
        job = json.loads(json.dumps(template).replace(EXPORTERS[0], HOST_JOB))
        job["job_name"] = HOST_JOB
        config["scrape_configs"].append(job)
        path.write_text(yaml.safe_dump(config, sort_keys=False))

    def series(self) -> float:
        if not self.shards:
            return counter(f"{self.query_url}/metrics", "prometheus_tsdb_head_series")
        # Every run starts a fresh store, so the series it created are its active ones.
        return counter(self.store_metrics(), "vm_new_timeseries_created_total")

    def samples_total(self) -> float:
        if not self.shards:
            return counter(
                f"{self.query_url}/metrics", "prometheus_tsdb_head_samples_appended_total"
            )
        return counter(self.store_metrics(), "vm_rows_inserted_total")

    def store_metrics(self) -> str:
        return f"{self.query_url}/metrics"

    def backlog(self) -> float | None:
        """Bytes the scrapers have queued for the store (None for Prometheus)."""
        if not self.shards:
            return None
        return sum(
            counter(f"{url}/metrics", "vm_persistentqueue_bytes_pending")
            for url in self.scraper_urls
        )

    def rules_totals(self) -> dict[tuple, list[float]]:
        """vmalert's seconds and rounds so far, per group ({} for Prometheus)."""
        if not self.shards:
            return {}
        text = http_get(f"{self.rules_url}/metrics").decode()
        totals: dict[tuple, list[float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in (
                    "vmalert_iteration_duration_seconds_sum",
                    "vmalert_iteration_duration_seconds_count",
                ):
                    continue
                group = tuple(sorted(sample.labels.items()))
                sum_and_count = totals.setdefault(group, [0.0, 0.0])
                sum_and_count[1 if sample.name.endswith("_count") else 0] += sample.value
        return totals

    def rules_round(self, before: dict[tuple, list[float]]) -> tuple[float | None, str]:
        """vmalert's mean seconds per evaluation round of its slowest group over the rounds
        since `before` (rules_totals() at the window's start). The groups run side by
        side, each on its own interval: the slowest says whether one is late. Counted
        from vmalert's start instead, the rounds of a fresh store still registering its
        series (a trivial query then took 20 s) would be most of the figure."""
        if not self.shards:
            return None, ""
        means = []
        for group, (total, count) in self.rules_totals().items():
            total0, count0 = before.get(group, [0.0, 0.0])
            if count > count0:
                means.append(((total - total0) / (count - count0), dict(group).get("group", "")))
        return max(means) if means else (None, "")

    def stop(self) -> None:
        stop_all(list(self.procs.values()))

    def exited(self) -> list[str]:
        """Each engine process that is no longer running: its exit status and log's tail."""
        said = []
        for spec in self.engine_specs:
            proc = self.procs.get(self.shown(spec.name))
            if proc is None or proc.poll() is None:
                continue
            log = self.work / f"{spec.name}.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            said.append(f"{spec.name} exited with {proc.returncode}: " + " | ".join(tail))
        return said

    def keep_logs(self) -> Path:
        """The engines' logs, copied out of the work folder (removed with the store's data)."""
        kept = Path(tempfile.mkdtemp(prefix="mac-scale-failed-"))
        for log in self.work.glob("*.log"):
            shutil.copy(log, kept / log.name)
        return kept


def scrape_record(query_url: str, at: float, window: float) -> tuple[int, int, int]:
    """(targets, missed scrapes, failed scrapes) of the fleet's jobs from the raw `up`
    samples of the window."""
    selector = f'up{{job=~"{"|".join(JOBS)}"}}[{int(window)}s]'
    params = urllib.parse.urlencode({"query": selector, "time": f"{at:.3f}"})
    data = json.loads(http_get(f"{query_url}/api/v1/query?{params}"))["data"]["result"]
    missed = failed = 0
    for series in data:
        stamps = [float(t) for t, _ in series["values"]]
        failed += sum(1 for _, v in series["values"] if float(v) == 0)
        edges = [at - window, *stamps, at]
        for before, after in itertools.pairwise(edges):
            gap = after - before
            if gap > 1.5 * INTERVAL:
                missed += math.floor(gap / INTERVAL + 0.5) - 1
    return len(data), missed, failed


def chart_queries(node_id: int, range_name: str = "1h") -> list[list[str]]:
    """Every chart's PromQL for one NVIDIA node, as macweb.dashboard.charts fills them."""
    from macweb.dashboard.charts import CHARTS, RANGES, promql_string, rate_window

    step = RANGES[range_name][1]
    sel, win = f"node={promql_string(str(node_id))}", rate_window(step)
    charts = []
    for spec in CHARTS.values():
        templates = spec.queries.get(None) or spec.queries.get("nvidia") or ()
        charts.append([q.expr.format(sel=sel, win=win) for q in templates])
    return [c for c in charts if c]


async def chart_latency(
    query_url: str, charts: list[list[str]], rounds: int, range_name: str = "1h"
) -> list[float]:
    """Milliseconds per chart over range_name (its queries in parallel, as the dashboard
    sends them, with the dashboard's step for that range)."""
    import aiohttp

    from macweb.dashboard.charts import RANGES

    seconds, step = RANGES[range_name]
    end = time.time()
    start = end - seconds
    times: list[float] = []
    errors: list[str] = []
    async with aiohttp.ClientSession() as session:

        async def one(expr: str) -> None:
            params = {"query": expr, "start": start, "end": end, "step": step}
            async with session.get(f"{query_url}/api/v1/query_range", params=params) as answer:
                body = await answer.read()
                if answer.status != 200:  # said in the output, the chart's time still counted
                    errors.append(f"{answer.status} {body[:200].decode(errors='replace')}")

        for _ in range(rounds):
            for queries in charts:
                began = time.perf_counter()
                await asyncio.gather(*(one(expr) for expr in queries))
                times.append(1000 * (time.perf_counter() - began))
    if errors:
        print(f"chart queries: {len(errors)} errors, the first: {errors[0]}", flush=True)
    return times


def start_fleet(nodes: int, edits: list[Edit]) -> list[subprocess.Popen]:
    argv = [
        sys.executable, "-m", "testkit.simfleet", "--nodes", str(nodes), "--base", BASE,
        "--profiles", "nvidia=1", "--fault-rate", "0", f"--collect-interval={INTERVAL}",
    ]  # fmt: skip
    argv, _ = edited(argv, {}, edits, "fleet")
    fleet = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, text=True),
        subprocess.Popen(
            [sys.executable, "-m", "bench.hostpages", "--nodes", str(nodes), "--base", BASE],
            stdout=subprocess.PIPE, text=True,
        ),
    ]  # fmt: skip
    try:
        for proc, what in zip(fleet, ("the simulated fleet", "the host pages"), strict=True):
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.strip() == "READY":
                    break
            else:
                raise RuntimeError(f"{what} exited with {proc.wait()} before READY")
    except BaseException:
        stop_all(fleet)
        raise
    return fleet


def settle(engine: Engine, limit: float = SETTLE_LIMIT) -> float:
    """Seconds waited until the engine ingested at the scrape rate two intervals running
    (`limit` if never). Below the rate is not settled either: a store that stalls while
    it registers series ingests little, and the catch-up follows."""
    start = time.monotonic()
    steady = 0
    while time.monotonic() - start < limit:
        before, at = engine.samples_total(), time.monotonic()
        time.sleep(INTERVAL)
        rate = (engine.samples_total() - before) / (time.monotonic() - at)
        expected = engine.series() / INTERVAL
        steady = steady + 1 if expected / SETTLE_SLACK <= rate <= expected * SETTLE_SLACK else 0
        if steady == 2:
            return time.monotonic() - start
    return limit


def stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    """The process and its live children (the simfleet splits into processes), but this
    process alone: its children are the engines and the fleet, counted apart."""
    if proc.pid == os.getpid():
        return [proc]
    return [proc, *proc.children(recursive=True)]


def tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds (user + system) of a process and its live children (see _tree)."""
    total = 0.0
    for one in _tree(proc):
        try:
            times = one.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def tree_rss(proc: psutil.Process) -> float:
    total = 0.0
    for one in _tree(proc):
        try:
            total += one.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def view_call_cpu(engine: Engine, proc: psutil.Process) -> float | None:
    """CPU seconds the targets view spends on one merged /api/v1/targets."""
    if not engine.shards:
        return None
    before = tree_cpu(proc)
    http_get(f"{engine.view_url}/api/v1/targets", timeout=60)
    return tree_cpu(proc) - before


def measure(
    key: str,
    nodes: int,
    charts: dict[str, list[list[str]]],
    tuning: tuple[str, list[Edit]],
    shards: int = 1,
    warmup: float = WARMUP,
    window: float = WINDOW,
) -> Sample:
    work = Path(tempfile.mkdtemp(prefix="mac-scale-"))
    bare = bare_targets(tuning)
    groups = job_groups(fleet_rows(nodes), bare)
    master = MasterStandIn()
    fleet: list[subprocess.Popen] = []
    engine: Engine | None = None
    try:
        fleet = start_fleet(nodes, tuning[1])
        engine = Engine(key, shards, work, master.port, tuning[1], scrapes_in_store(tuning))
        started = time.time()
        engine.start(groups)
        watched = {name: psutil.Process(p.pid) for name, p in engine.procs.items()}
        watched.update(
            zip(FLEET, [psutil.Process(p.pid) for p in fleet] + [psutil.Process()], strict=True)
        )
        time.sleep(warmup)
        settled = settle(engine)
        cpu0 = {name: tree_cpu(p) for name, p in watched.items()}
        samples0, wall0 = engine.samples_total(), time.monotonic()
        rules0 = engine.rules_totals()
        psutil.cpu_percent()
        time.sleep(window)
        busy = psutil.cpu_percent() / 100
        wall = time.monotonic() - wall0
        procs = {
            name: ((tree_cpu(p) - cpu0[name]) / wall, tree_rss(p)) for name, p in watched.items()
        }
        load = os.getloadavg()
        rate = (engine.samples_total() - samples0) / wall
        series = engine.series()
        rules, rules_group = engine.rules_round(rules0)
        backlog = engine.backlog()
        # The last INTERVAL may not be queryable yet (the store's latency offset).
        targets, missed, failed = scrape_record(
            engine.query_url, time.time() - INTERVAL, window - INTERVAL
        )
        expected = nodes * len(JOBS)
        missed += max(0, expected - targets) * int((window - INTERVAL) // INTERVAL)
        view = view_call_cpu(engine, watched["targets view"]) if engine.shards else None
        day = {}
        if engine.shards and not bare:
            _, imported, seconds = load_day(
                engine.query_url, chart_metrics(charts["24h"]),
                list(range(1, min(DAY_NODES, nodes) + 1)), started, INTERVAL,
            )  # fmt: skip
            day_ms = asyncio.run(chart_latency(engine.query_url, charts["24h"], QUERY_ROUNDS,
                                               "24h"))  # fmt: skip
            day = {"chart_day_ms": day_ms, "day_samples": imported, "day_import_s": seconds}
        # Without node labels the charts select nothing: an empty answer is no figure.
        latency = (
            [] if bare else asyncio.run(chart_latency(engine.query_url, charts["1h"], QUERY_ROUNDS))
        )
        return Sample(
            engine.name, tuning[0], nodes, targets, missed, failed, series, rate, procs, busy,
            load, latency, view, rules, settled, **day, backlog_bytes=backlog,
            programs=engine.programs, rules_group=rules_group,
        )  # fmt: skip
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        if engine is None or not engine.procs:
            raise
        # Which engine went away, if one did, and where its log is kept.
        said = "; ".join([*engine.exited(), f"logs kept in {engine.keep_logs()}"])
        raise RuntimeError(f"{exc} ({said})") from exc
    finally:
        if engine is not None:
            engine.stop()
        stop_all(fleet)
        master.close()
        shutil.rmtree(work, ignore_errors=True)


def per_thousand(value: float, nodes: int) -> float:
    return value / nodes * 1000


def _median_sample(samples: list[Sample]) -> Sample:
    def mid(attr: str) -> float:
        return median([getattr(s, attr) for s in samples])

    first = samples[0]
    procs = {
        name: (
            median([s.procs[name][0] for s in samples]),
            median([s.procs[name][1] for s in samples]),
        )
        for name in first.procs
    }
    loads = [s.load for s in samples]
    optional = {
        attr: (median(vals) if (vals := [getattr(s, attr) for s in samples if getattr(s, attr)
               is not None]) else None)
        for attr in ("view_call_cpu_s", "rules_round_s", "day_import_s", "backlog_bytes")
    }  # fmt: skip
    return Sample(
        first.engine, first.tuning, first.nodes, int(mid("targets")),
        int(max(s.missed for s in samples)), int(max(s.failed for s in samples)),
        mid("series"), mid("samples_per_s"), procs, mid("machine_busy"),
        tuple(median([load[i] for load in loads]) for i in range(3)),  # type: ignore[arg-type]
        [t for s in samples for t in s.chart_ms], **optional, settled_s=mid("settled_s"),
        chart_day_ms=[t for s in samples for t in s.chart_day_ms],
        day_samples=int(mid("day_samples")), programs=first.programs,
        rules_group=_group_of(samples, optional["rules_round_s"]),
    )  # fmt: skip


def _chart_ms(times: list[float]) -> str:
    return f"{median(times):.0f} / {percentile(times, 95):.0f}" if times else "not measured"


def _load(row: Sample) -> str:
    return " / ".join(f"{x:.1f}" for x in row.load)


def programs_line(medians: dict[tuple[str, str], list[Sample]]) -> str:
    """Which package each engine's programs came from (runs saved before it was
    recorded say nothing)."""
    by_engine: dict[str, dict[str, list[str]]] = {}
    for rows in medians.values():
        for row in rows:
            for process, version in row.programs.items():
                names = by_engine.setdefault(row.engine, {}).setdefault(version or "unknown", [])
                if process not in names:
                    names.append(process)
    if not by_engine:
        return ""
    said = [
        f"{engine}: " + ", ".join(f"{version} ({', '.join(names)})"
                                   for version, names in versions.items())
        for engine, versions in by_engine.items()
    ]  # fmt: skip
    return "Programs: " + "; ".join(said) + "."


def report(results: dict[tuple[str, str], list[list[Sample]]], args: argparse.Namespace) -> str:
    runs = args.runs
    command = (
        f"`bench/scale_metrics.py --sizes {args.sizes} --runs {runs} --engines {args.engines}"
        + (f" --debian {args.debian}" if getattr(args, "debian", "") else "")
        + "".join(f" --tuning '{t}'" for t in args.tuning)
        + f" --warmup {args.warmup:g} --window {args.window:g}`"
    )
    if args.from_json:
        command = "The runs saved by " + "; ".join(f"`{c}`" for c in args.from_json_commands)
    lines = [
        f"{command}: a simulated NVIDIA fleet "
        f"(8 GPUs, RDMA NICs, about {HOST_SERIES} host series per node from node_exporter's "
        "captured output; each page collected once per 15 s and gzipped once, as a real "
        "exporter), scraped every 15 s over loopback by each engine as `mac start master` "
        "starts it (its specs, configuration and rules); "
        + (
            "warm-up and window as each command says"
            if args.from_json
            else f"{args.warmup:.0f} s warm-up, {args.window:.0f} s measured"
        )
        + " once ingest ran at the scrape rate (the settled column: seconds past the "
        "warm-up; runs saved before it was measured show 0)"
        + f", medians of up to {runs} run(s) per row (the runs column). The node charts: "
        f"every chart of node 1's page, {QUERY_ROUNDS} rounds, each "
        "chart's queries side by side as the dashboard sends them, after the window; for "
        f"the store, once {DAY_NODES} nodes (node 1 first) were given the day before their "
        "first scrape by its import API (bench.day_history: every series the charts read, "
        "one point per 15 s), so its 1 h and 24 h charts read a full hour and a full day; "
        "Prometheus has no import API, so its 24 h charts are not measured. The machine is "
        "shared (2 cores): its load average (1 / 5 / 15 min, at the window's end) and busy "
        "share are shown with each row. Engine CPU and RSS count every process MAC starts "
        "for the engine and nothing of the fleet's.",
        "",
        "| engine | tuning | nodes | runs | targets seen | missed | failed | active series | "
        "samples/s | engine RSS MiB | engine CPU cores | fleet CPU cores | machine busy | "
        "load avg | settled s | node chart ms, 1 h (median / p95) | 24 h (median / p95) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    medians: dict[tuple[str, str], list[Sample]] = {}
    for key, by_size in results.items():
        medians[key] = [_median_sample(runs_of_size) for runs_of_size in by_size]
        for row, runs_of_size in zip(medians[key], by_size, strict=True):
            lines.append(
                f"| {row.engine} | {row.tuning} | {row.nodes:,} | {len(runs_of_size)} | "
                f"{row.targets:,} | {row.missed} "
                f"| {row.failed} | {row.series:,.0f} | {row.samples_per_s:,.0f} | "
                f"{row.rss_bytes / 2**20:,.0f} | {row.cpu_cores:.2f} | {row.fleet_cores:.2f} | "
                f"{row.machine_busy:.0%} | {_load(row)} | {row.settled_s:.0f} | "
                f"{_chart_ms(row.chart_ms)} | {_chart_ms(row.chart_day_ms)} |"
            )
    programs = programs_line(medians)
    if programs:
        lines += ["", programs]
    lines += ["", "Per process (medians; CPU cores over the window, RSS MiB at its end):", ""]
    lines += [
        "| engine | tuning | nodes | process | CPU cores | RSS MiB |",
        "|---|---|---|---|---|---|",
    ]
    for rows in medians.values():
        for row in rows:
            for name, (cpu, rss) in row.procs.items():
                lines.append(
                    f"| {row.engine} | {row.tuning} | {row.nodes:,} | {name} | {cpu:.3f} | "
                    f"{rss / 2**20:,.0f} |"
                )
    extra = [
        f"| {row.engine} | {row.tuning} | {row.nodes:,} | {_rules(row)} | "
        f"{_figure(row.view_call_cpu_s)} | {_day(row)} | {_mib(row.backlog_bytes)} |"
        for rows in medians.values()
        for row in rows
        if row.rules_round_s is not None or row.view_call_cpu_s is not None
    ]
    if extra:
        lines += [
            "",
            "The rules and the targets view: vmalert's mean seconds per evaluation round of "
            "its slowest group, over the rounds of the window (groups run side by side, each "
            "every 15 s or its own interval; "
            "their queries run by the store, whose CPU counts them), and the CPU seconds "
            "the targets view spends on one merged /api/v1/targets (it works only when asked: "
            "the node page when a target is down, a person's curl); and the day of history "
            "the 24 h charts read: samples imported, and the seconds from the export of the "
            "live minutes until the day was searchable; and what the scrapers had queued "
            "for the store at the window's end (vmagent's queue: a store that falls "
            "behind its scrapers shows here, and its samples not yet stored as missed "
            "scrapes).",
            "",
            "| engine | tuning | nodes | vmalert s per round (slowest group) | "
            "targets view CPU s per call | day of history: samples, seconds | "
            "scrapers' queue to the store, MiB |",
            "|---|---|---|---|---|---|---|",
            *extra,
        ]
    lines += _per_thousand(medians, results)
    return "\n".join(lines)


def _figure(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f}"


def _mib(value: float | None) -> str:
    return "not measured" if value is None else f"{value / 2**20:,.0f}"


def _day(row: Sample) -> str:
    if row.day_import_s is None:
        return "not measured"
    return f"{row.day_samples:,}, {row.day_import_s:.0f} s"


def _per_thousand(medians, results) -> list[str]:
    lines = [
        "",
        "Per 1,000 nodes, from the largest size held with no missed or failed scrape (every "
        "run of it): engine CPU and RSS divided by the size (the fixed cost included, so this "
        "overstates large fleets a little). The 12,500-node column multiplies these per-"
        "process figures: computed, not measured.",
        "",
        "| engine | tuning | largest held (measured) | series / 1k | samples/s / 1k | "
        "RSS MiB / 1k | CPU cores / 1k | samples/s per core | "
        "12,500 nodes: series, RSS GiB, cores (computed) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, rows in medians.items():
        held = [row for row, runs in zip(rows, results[key], strict=True)
                if all(s.held for s in runs)]  # fmt: skip
        if not held:
            lines.append(f"| {key[0]} | {key[1]} | none of the sizes tried | | | | | | |")
            continue
        best = held[-1]
        cores = best.cpu_cores or float("nan")
        scale = PROJECTED_NODES / best.nodes
        lines.append(
            f"| {best.engine} | {best.tuning} | {best.nodes:,} | "
            f"{per_thousand(best.series, best.nodes):,.0f} | "
            f"{per_thousand(best.samples_per_s, best.nodes):,.0f} | "
            f"{per_thousand(best.rss_bytes, best.nodes) / 2**20:,.0f} | "
            f"{per_thousand(best.cpu_cores, best.nodes):.3f} | "
            f"{best.samples_per_s / cores:,.0f} | "
            f"{best.series * scale / 1e6:.1f} M, {best.rss_bytes * scale / 2**30:.0f} GiB, "
            f"{best.cpu_cores * scale:.1f} |"
        )
    return lines


def memory_stop(sizes: list[int], nodes: int, runs: list[Sample]) -> str:
    """Why the next size is not tried ("" when it fits): its engine RSS, scaled from this
    size, must stay under MEMORY_SHARE of the memory available now (fleet included)."""
    larger = [n for n in sizes if n > nodes]
    if not larger:
        return ""
    need = max(s.rss_bytes for s in runs) / nodes * larger[0]
    free = psutil.virtual_memory().available * MEMORY_SHARE
    if need <= free:
        return ""
    return (
        f"{larger[0]:,} nodes would need about {need / 2**30:.1f} GiB (scaled from "
        f"{nodes:,}), {free / 2**30:.1f} GiB usable"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale_metrics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sizes", default="500,1000,1500,2000", help="fleet sizes, ascending")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="prometheus,vm")
    parser.add_argument("--shards", type=int, default=1, help="scrapers of engine vm")
    parser.add_argument(
        "--tuning", action="append", default=[], help="NAME=EDIT ... or defaults (repeatable)"
    )
    parser.add_argument("--warmup", type=float, default=WARMUP, help="seconds before measuring")
    parser.add_argument("--window", type=float, default=WINDOW, help="seconds measured")
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    parser.add_argument(
        "--section",
        default="",
        metavar="NAME",
        help="with --write: a section of its own (e.g. 'tunings at 1,000 nodes'), beside "
        "the main tables instead of replacing them",
    )
    parser.add_argument(
        "--debian",
        default="",
        metavar="RELEASE",
        help="run Prometheus and VictoriaMetrics as Debian RELEASE packages them (e.g. "
        "trixie), downloaded and unpacked beside this host's by testkit.debian_release",
    )
    parser.add_argument("--json", help="also write every run's figures to this file")
    parser.add_argument(
        "--from-json",
        action="append",
        default=[],
        metavar="FILE",
        help="no run: the report of runs saved with --json by earlier invocations (each "
        "kept within the bench lock's ~10 minutes), medians per engine, tuning and size",
    )
    args = parser.parse_args(argv)
    if args.from_json:
        return from_saved(args)
    # A kill (timeout, a session's end) stops the engines and the fleet as Ctrl-C does:
    # measure()'s finally runs instead of leaving them running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sizes = sorted(int(s) for s in args.sizes.split(","))
    try:
        tunings = [("mac", [])] + [
            parse_tuning(t) if "=" in t else (t, builtin_tuning(t)) for t in args.tuning
        ]
    except ValueError as exc:
        parser.error(str(exc))
    if args.shards != 1 and any(scrapes_in_store(t) for t in tunings):
        parser.error(f"--tuning {STORE_SCRAPES}: the store can take one scraper's job (--shards 1)")
    if args.debian:
        packages = ["victoria-metrics", "prometheus"]
        try:
            root = fetch(args.debian, packages)
        except RuntimeError as exc:
            parser.error(f"--debian {args.debian}: {exc}")
        # The engines' specs read MAC_*_BIN (maccli.master.scaleout.binary) from here.
        os.environ.update(mac_settings(root, packages))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")
    import django

    django.setup()
    charts = {name: chart_queries(1, name) for name in ("1h", "24h")}
    results: dict[tuple[str, str], list[list[Sample]]] = {}
    notes: list[str] = []
    everything: list[dict] = []
    for key in args.engines.split(","):
        if key not in ("prometheus", "vm"):
            parser.error(f"--engines: {key!r} is neither prometheus nor vm")
        for tuning in tunings if key == "vm" else [t for t in tunings if for_prometheus(t)]:
            rows: list[list[Sample]] = []
            for nodes in sizes:
                runs = []
                for run in range(args.runs):
                    try:
                        sample = measure(
                            key, nodes, charts, tuning, args.shards, args.warmup, args.window
                        )
                    except (OSError, RuntimeError, ValueError, KeyError) as exc:
                        # Said, not hidden: the size is left out of the tables.
                        notes.append(f"{key} [{tuning[0]}] {nodes} nodes run {run + 1}: {exc}")
                        print(f"run failed: {notes[-1]}", flush=True)
                        continue
                    everything.append(
                        {**sample.__dict__, "run": run + 1, "command": " ".join(sys.argv[1:])}
                    )
                    per = ", ".join(f"{n} {c:.3f}" for n, (c, _) in sample.procs.items())
                    print(
                        f"{sample.engine} [{sample.tuning}] {nodes} nodes run {run + 1}: targets "
                        f"{sample.targets}, missed {sample.missed}, failed {sample.failed}, "
                        f"series {sample.series:,.0f}, {sample.samples_per_s:,.0f} samples/s, "
                        f"engine RSS {sample.rss_bytes / 2**20:.0f} MiB, engine CPU "
                        f"{sample.cpu_cores:.2f}, fleet CPU {sample.fleet_cores:.2f}, settled "
                        f"after {sample.settled_s:.0f} s, busy "
                        f"{sample.machine_busy:.0%}, load {_load(sample)}; chart ms (median / "
                        f"p95) 1 h {_chart_ms(sample.chart_ms)}, 24 h "
                        f"{_chart_ms(sample.chart_day_ms)}; queued for the store (MiB) "
                        f"{_mib(sample.backlog_bytes)}; {per}",
                        flush=True,
                    )
                    runs.append(sample)
                if not runs:
                    break
                rows.append(runs)
                if not all(s.held for s in runs):
                    break  # larger sizes would miss too
                stop = memory_stop(sizes, nodes, runs)
                if stop:
                    notes.append(f"{key} [{tuning[0]}]: (memory) {stop}")
                    break
            results[(key, tuning[0])] = rows
            if args.json:
                Path(args.json).write_text(json.dumps(everything, indent=1, default=list))
    text = report(results, args)
    if notes:
        text += "\n\nNot measured: " + "; ".join(notes) + "."
    print(text)
    if args.write:
        write_section(args, text)
    return 0


def write_section(args: argparse.Namespace, text: str) -> None:
    if not args.section:
        update_section("scale-metrics", "Metrics at scale: one Prometheus vs vmagent + store", text)
        return
    key = "scale-metrics-" + re.sub(r"[^a-z0-9]+", "-", args.section.lower()).strip("-")
    update_section(key, f"Metrics at scale: {args.section}", text)


def _group_of(samples: list[Sample], figure: float | None) -> str:
    """The slowest group of the run whose round time is nearest the median `figure`."""
    named = [s for s in samples if s.rules_group and s.rules_round_s is not None]
    if figure is None or not named:
        return ""
    return min(named, key=lambda s: abs(s.rules_round_s - figure)).rules_group  # type: ignore[operator]


def _rules(row: Sample) -> str:
    """vmalert's slowest round, and its group: "3.696 (mac-rdma-errors)"."""
    figure = _figure(row.rules_round_s)
    return f"{figure} ({row.rules_group})" if row.rules_group else figure


def from_saved(args: argparse.Namespace) -> int:
    """The report (and with --write, docs/benchmarks.md) of runs saved with --json."""
    results: dict[tuple[str, str], dict[int, list[Sample]]] = {}
    commands: list[str] = []
    for name in args.from_json:
        for item in json.loads(Path(name).read_text()):
            command = item.pop("command", "")
            item.pop("run", None)
            if command and command not in commands:
                commands.append(command)
            item["procs"] = {k: tuple(v) for k, v in item["procs"].items()}
            item["load"] = tuple(item["load"])
            sample = Sample(**item)
            by_size = results.setdefault((sample.engine, sample.tuning), {})
            by_size.setdefault(sample.nodes, []).append(sample)
    grouped = {key: [by_size[n] for n in sorted(by_size)] for key, by_size in results.items()}
    args.from_json_commands = [
        "python -m bench.scale_metrics " + c.split(" --json")[0] for c in commands
    ] or ["(commands not saved)"]
    args.runs = max(len(runs) for rows in grouped.values() for runs in rows)
    text = report(grouped, args)
    print(text)
    if args.write:
        write_section(args, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
