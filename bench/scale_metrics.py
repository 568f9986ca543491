"""Metrics at scale: the largest GPU fleet one Prometheus, and vmagent -> victoria-metrics, hold.

What runs, all real processes on loopback:

- the fleet: ``python -m testkit.simfleet --nodes N --profiles nvidia=1`` (8 GPUs'
  dcgm-exporter page, the RDMA NICs' nic-exporter page, sys-exporter) plus
  ``python -m bench.hostpages`` (node_exporter's captured output, HOST_SERIES series per
  node), about 2,000 series per node;
- engine ``prometheus``: Debian's /usr/bin/prometheus scraping every target every 15 s;
- engine ``vm``: /usr/bin/vmagent scraping the same targets every 15 s and remote-writing
  to one /usr/bin/victoria-metrics, the pair MAC_SCRAPE_SHARDS=1 runs.

For each engine and fleet size: start fresh, wait WARMUP, then over WINDOW seconds
measure the engine processes' CPU (user+system per wall second) and RSS, the engine's
own counters for active series and ingested samples per second, and the scrapes: the
raw `up` samples of every target over the window (an instant query of `up[W]`), where
a gap longer than 1.5 intervals is a missed scrape and up=0 a failed one. A size is
*held* when no target missed or failed a scrape. Then the node chart latency: every
query of every chart of macweb.dashboard.charts for one NVIDIA node, over a 1 h range,
as the dashboard sends them (one chart's queries concurrently), QUERY_ROUNDS rounds.

Per-1,000-node figures divide what was measured at the largest held size; the
12,500-node projection multiplies them linearly and says so.

    nice -n 10 .venv/bin/python -m bench.scale_metrics --sizes 50,100 --runs 1   # a try
    .venv/bin/python -m bench.scale_metrics --sizes 250,500,1000,2000,3000 --runs 3 --write
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.hostpages import HOST_PORT, HOST_SERIES
from bench.report import median, percentile, update_section
from contract.services import BY_NAME
from testkit.ports import free_port
from testkit.simfleet.fleet import node_addresses

BASE = "127.40.0.0"
INTERVAL = 15
WARMUP = 45.0
WINDOW = 120.0
QUERY_ROUNDS = 10
PROJECTED_NODES = 12_500
MEMORY_SHARE = 0.7  # of the available memory a size may take (the fleet needs the rest)
JOBS = {
    "sys-exporter": BY_NAME["sys-exporter"].port,
    "dcgm-exporter": BY_NAME["dcgm-exporter"].port,
    "nic-exporter": BY_NAME["nic-exporter"].port,
    "host-capture": HOST_PORT,
}


@dataclass
class Sample:
    engine: str
    nodes: int
    targets: int
    missed: int
    failed: int
    series: float
    samples_per_s: float
    rss_bytes: float
    cpu_cores: float
    machine_busy: float  # the whole machine's CPU use during the window, 0..1
    chart_ms: list[float] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return self.missed == 0 and self.failed == 0


def write_targets(folder: Path, nodes: int) -> Path:
    """File-SD files, one per job, with the labels MAC's targets carry."""
    folder.mkdir(parents=True, exist_ok=True)
    for job, port in JOBS.items():
        groups = [
            {
                "targets": [f"{ip}:{port}"],
                "labels": {"node": str(i + 1), "hostname": f"sim-{i + 1}", "gpu_vendor": "nvidia"},
            }
            for i, ip in enumerate(node_addresses(nodes, BASE))
        ]
        (folder / f"{job}.json").write_text(json.dumps(groups))
    config = {
        "global": {"scrape_interval": f"{INTERVAL}s", "scrape_timeout": "10s"},
        "scrape_configs": [
            {"job_name": job, "file_sd_configs": [{"files": [str(folder / f"{job}.json")]}]}
            for job in JOBS
        ],
    }
    path = folder / "scrape.yml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def wait_ready(proc: subprocess.Popen, what: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "READY":
            return
    raise RuntimeError(f"{what} exited with {proc.wait()} before READY")


def http_get(url: str, timeout: float = 30) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.read()


def wait_http(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            http_get(url, timeout=2)
            return
        except OSError:
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


class Engine:
    """One metrics engine under test: its processes, query URL and counters."""

    name = ""

    def __init__(self, scrape: Path, work: Path) -> None:
        self.scrape, self.work = scrape, work
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        raise NotImplementedError

    def series(self) -> float:
        raise NotImplementedError

    def samples_total(self) -> float:
        raise NotImplementedError

    def stop(self) -> None:
        stop_all(self.procs)

    def _run(self, argv: list[str]) -> None:
        log = (self.work / f"{Path(argv[0]).name}.log").open("w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))


class Prometheus(Engine):
    name = "prometheus"

    def start(self) -> None:
        self.port = free_port()
        self.query_url = f"http://127.0.0.1:{self.port}"
        self._run(
            [
                "/usr/bin/prometheus",
                f"--config.file={self.scrape}",
                f"--storage.tsdb.path={self.work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ]
        )
        wait_http(f"{self.query_url}/-/ready")

    def series(self) -> float:
        return counter(f"{self.query_url}/metrics", "prometheus_tsdb_head_series")

    def samples_total(self) -> float:
        return counter(f"{self.query_url}/metrics", "prometheus_tsdb_head_samples_appended_total")


class VictoriaMetrics(Engine):
    name = "vmagent + victoria-metrics"

    def start(self) -> None:
        store, agent = free_port(), free_port()
        self.query_url = f"http://127.0.0.1:{store}"
        self.agent_url = f"http://127.0.0.1:{agent}"
        self._run(
            [
                "/usr/bin/victoria-metrics",
                f"-storageDataPath={self.work / 'store'}",
                f"-httpListenAddr=127.0.0.1:{store}",
                "-search.latencyOffset=1s",
            ]
        )
        wait_http(f"{self.query_url}/health")
        self._run(
            [
                "/usr/bin/vmagent",
                f"-promscrape.config={self.scrape}",
                f"-remoteWrite.url={self.query_url}/api/v1/write",
                f"-remoteWrite.tmpDataPath={self.work / 'buffer'}",
                f"-httpListenAddr=127.0.0.1:{agent}",
            ]
        )
        wait_http(f"{self.agent_url}/health")

    def series(self) -> float:
        # Every run starts a fresh store, so the series it created are its active ones.
        # (Its per-hour gauge, vm_cache_entries{type="storage/hour_metric_ids"}, reads
        # 0 for a while after the hour turns: a run at 00:30 measured nothing with it.)
        return counter(f"{self.query_url}/metrics", "vm_new_timeseries_created_total")

    def samples_total(self) -> float:
        return counter(f"{self.query_url}/metrics", "vm_rows_inserted_total")


def scrape_record(query_url: str, at: float, window: float) -> tuple[int, int, int]:
    """(targets, missed scrapes, failed scrapes) from the raw `up` samples of the window."""
    params = urllib.parse.urlencode({"query": f"up[{int(window)}s]", "time": f"{at:.3f}"})
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


def chart_queries(node_id: int) -> list[list[str]]:
    """Every chart's PromQL for one NVIDIA node, as macweb.dashboard.charts fills them."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")
    import django

    django.setup()
    from macweb.dashboard.charts import CHARTS, promql_string, rate_window

    step = 15
    sel, win = f"node={promql_string(str(node_id))}", rate_window(step)
    charts = []
    for spec in CHARTS.values():
        templates = spec.queries.get(None) or spec.queries.get("nvidia") or ()
        charts.append([q.expr.format(sel=sel, win=win) for q in templates])
    return [c for c in charts if c]


async def chart_latency(query_url: str, charts: list[list[str]], rounds: int) -> list[float]:
    """Milliseconds per chart (its queries in parallel, as the dashboard sends them)."""
    import aiohttp

    end = time.time()
    start = end - 3600
    times = []
    async with aiohttp.ClientSession() as session:

        async def one(expr: str) -> None:
            params = {"query": expr, "start": start, "end": end, "step": 15}
            async with session.get(f"{query_url}/api/v1/query_range", params=params) as answer:
                await answer.read()
                answer.raise_for_status()

        for _ in range(rounds):
            for queries in charts:
                began = time.perf_counter()
                await asyncio.gather(*(one(expr) for expr in queries))
                times.append(1000 * (time.perf_counter() - began))
    return times


def start_fleet(nodes: int) -> list[subprocess.Popen]:
    fleet = [
        subprocess.Popen(
            [sys.executable, "-m", "testkit.simfleet", "--nodes", str(nodes), "--base", BASE,
             "--profiles", "nvidia=1", "--fault-rate", "0"],
            stdout=subprocess.PIPE, text=True,
        ),
        subprocess.Popen(
            [sys.executable, "-m", "bench.hostpages", "--nodes", str(nodes), "--base", BASE],
            stdout=subprocess.PIPE, text=True,
        ),
    ]  # fmt: skip
    try:
        wait_ready(fleet[0], "the simulated fleet")
        wait_ready(fleet[1], "the host pages")
    except BaseException:
        stop_all(fleet)
        raise
    return fleet


def stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def measure(
    engine_class: type[Engine],
    nodes: int,
    charts: list[list[str]],
    warmup: float = WARMUP,
    window: float = WINDOW,
) -> Sample:
    work = Path(tempfile.mkdtemp(prefix="mac-scale-"))
    fleet = start_fleet(nodes)
    engine = engine_class(write_targets(work / "targets", nodes), work)
    try:
        engine.start()
        procs = [psutil.Process(p.pid) for p in engine.procs]
        time.sleep(warmup)
        cpu0 = sum(sum(p.cpu_times()[:2]) for p in procs)
        samples0, wall0 = engine.samples_total(), time.monotonic()
        psutil.cpu_percent()
        time.sleep(window)
        busy = psutil.cpu_percent() / 100
        wall = time.monotonic() - wall0
        cpu = (sum(sum(p.cpu_times()[:2]) for p in procs) - cpu0) / wall
        rate = (engine.samples_total() - samples0) / wall
        rss = sum(p.memory_info().rss for p in procs)
        series = engine.series()
        # The last INTERVAL may not be queryable yet (the store's latency offset).
        targets, missed, failed = scrape_record(
            engine.query_url, time.time() - INTERVAL, window - INTERVAL
        )
        expected = nodes * len(JOBS)
        missed += max(0, expected - targets) * int((window - INTERVAL) // INTERVAL)
        latency = asyncio.run(chart_latency(engine.query_url, charts, QUERY_ROUNDS))
        return Sample(
            engine.name, nodes, targets, missed, failed, series, rate, rss, cpu, busy, latency
        )
    finally:
        engine.stop()
        stop_all(fleet)
        shutil.rmtree(work, ignore_errors=True)


def per_thousand(value: float, nodes: int) -> float:
    return value / nodes * 1000


def report(
    results: dict[str, list[list[Sample]]],
    sizes: list[int],
    runs: int,
    warmup: float = WARMUP,
    window: float = WINDOW,
) -> str:
    lines = [
        f"`bench/scale_metrics.py --sizes {','.join(map(str, sizes))} --runs {runs}`: a "
        f"simulated NVIDIA fleet (8 GPUs, RDMA NICs, about {HOST_SERIES} host series per node "
        "from node_exporter's captured output), scraped every 15 s over loopback by each engine; "
        f"{warmup:.0f} s warm-up, {window:.0f} s measured, medians of {runs} run(s) per size. "
        "The fleet runs on the same cores, so the machine's load is shown beside each row.",
        "",
        "| engine | nodes | targets seen | missed | failed | active series | samples/s | "
        "engine RSS MiB | engine CPU cores | machine busy | node chart ms (median / p95) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary = []
    for engine, by_size in results.items():
        held = []
        for runs_of_size in by_size:
            row = _median_sample(runs_of_size)
            lines.append(
                f"| {engine} | {row.nodes:,} | {row.targets:,} | {row.missed} | {row.failed} | "
                f"{row.series:,.0f} | {row.samples_per_s:,.0f} | {row.rss_bytes / 2**20:,.0f} | "
                f"{row.cpu_cores:.2f} | {row.machine_busy:.0%} | "
                f"{median(row.chart_ms):.0f} / {percentile(row.chart_ms, 95):.0f} |"
            )
            if all(s.held for s in runs_of_size):
                held.append(row)
        summary.append((engine, held, by_size))
    lines += ["", "Per 1,000 nodes from the sizes held with no missed or failed scrape: series "
              "and samples/s divided by the size; RSS and CPU as the growth between the "
              "smallest and the largest held size (so the engine's fixed cost is not counted "
              "per node), or divided by the size when only one size held. Per core: samples/s "
              "and nodes per engine CPU core at the largest held size. The 12,500-node column "
              "is computed from these (linear), not measured.", ""]  # fmt: skip
    lines += [
        "| engine | largest held (measured) | series / 1k | samples/s / 1k | RSS MiB / 1k | "
        "CPU cores / 1k | samples/s per core | nodes per core | "
        "12,500 nodes: series, RSS GiB, cores (computed) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for engine, held, by_size in summary:
        if not held:
            lines.append(f"| {engine} | none of the sizes tried | | | | | | | |")
            continue
        low, best = held[0], held[-1]
        tried = max(s[0].nodes for s in by_size)
        shown = f"{best.nodes:,}" + (" (largest tried)" if best.nodes == tried else "")
        if best.nodes > low.nodes:
            span = best.nodes - low.nodes
            rss_node = (best.rss_bytes - low.rss_bytes) / span
            cpu_node = (best.cpu_cores - low.cpu_cores) / span
        else:
            rss_node, cpu_node = best.rss_bytes / best.nodes, best.cpu_cores / best.nodes
        extra = PROJECTED_NODES - best.nodes
        cores = best.cpu_cores or float("nan")
        lines.append(
            f"| {engine} | {shown} | {per_thousand(best.series, best.nodes):,.0f} | "
            f"{per_thousand(best.samples_per_s, best.nodes):,.0f} | "
            f"{rss_node * 1000 / 2**20:,.0f} | {cpu_node * 1000:.2f} | "
            f"{best.samples_per_s / cores:,.0f} | {best.nodes / cores:,.0f} | "
            f"{best.series / best.nodes * PROJECTED_NODES / 1e6:.1f} M, "
            f"{(best.rss_bytes + rss_node * extra) / 2**30:.0f} GiB, "
            f"{best.cpu_cores + cpu_node * extra:.1f} |"
        )
    lines += [
        "",
        f"The node chart's range is 1 h, of which the store holds only the run's "
        f"{(warmup + window) / 60:.0f} min: the latency is that of a young store, a floor "
        "for a store with an hour of every node's series. "
        "A size with the machine near 100 % busy is limited by the shared cores (fleet and "
        "engine together), not by the engine alone. The projection assumes cost grows "
        "linearly with nodes, which holds for scraping and ingestion and understates query "
        "cost; the store's cluster version "
        "(docs/scaling.md) is the path past one machine.",
    ]
    return "\n".join(lines)


def _median_sample(samples: list[Sample]) -> Sample:
    def mid(attr: str) -> float:
        return median([getattr(s, attr) for s in samples])

    first = samples[0]
    return Sample(
        first.engine,
        first.nodes,
        int(mid("targets")),
        int(max(s.missed for s in samples)),
        int(max(s.failed for s in samples)),
        mid("series"),
        mid("samples_per_s"),
        mid("rss_bytes"),
        mid("cpu_cores"),
        mid("machine_busy"),
        [t for s in samples for t in s.chart_ms],
    )


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
    parser = argparse.ArgumentParser(prog="python -m bench.scale_metrics", description=__doc__)
    parser.add_argument("--sizes", default="250,500,1000,2000", help="fleet sizes, ascending")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="prometheus,vm")
    parser.add_argument("--warmup", type=float, default=WARMUP, help="seconds before measuring")
    parser.add_argument("--window", type=float, default=WINDOW, help="seconds measured")
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    engines = {"prometheus": Prometheus, "vm": VictoriaMetrics}
    charts = chart_queries(1)
    results: dict[str, list[list[Sample]]] = {}
    notes: list[str] = []
    for key in args.engines.split(","):
        engine_class = engines[key]
        results[engine_class.name] = []
        for nodes in sizes:
            runs = []
            for run in range(args.runs):
                sample = measure(engine_class, nodes, charts, args.warmup, args.window)
                print(
                    f"{sample.engine} {nodes} nodes run {run + 1}: targets {sample.targets}, "
                    f"missed {sample.missed}, failed {sample.failed}, series {sample.series:,.0f}, "
                    f"{sample.samples_per_s:,.0f} samples/s, RSS {sample.rss_bytes / 2**20:.0f} "
                    f"MiB, CPU {sample.cpu_cores:.2f}, busy {sample.machine_busy:.0%}, chart "
                    f"{median(sample.chart_ms):.0f} ms",
                    flush=True,
                )
                runs.append(sample)
            results[engine_class.name].append(runs)
            if not all(s.held for s in runs):
                break  # larger sizes would miss too
            stop = memory_stop(sizes, nodes, runs)
            if stop:
                notes.append(f"{engine_class.name}: {stop}")
                break
    text = report(results, sizes, args.runs, args.warmup, args.window)
    if notes:
        text += "\n\nNot tried (memory): " + "; ".join(notes) + "."
    print(text)
    if args.write:
        update_section("scale-metrics", "Metrics at scale: one Prometheus vs vmagent + store", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
