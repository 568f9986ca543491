"""Benchmark: job attribution (docs/jobs.md): what one central read of Slurm costs with N
running GPU jobs, the series each way of labelling jobs makes at 1,000 GPU nodes, and
the job page's latency for a 64-GPU job over 24 h.

1. Read cost: a 10-node lab (8 GPUs each, slurmdbd) with 0, 40 and 80 one-GPU jobs
   running; the median of 10 calls each of `squeue --json` (parsed into SlurmJob with
   GPU indexes) and `sacct` over the last hour, the two reads of one sweep.
2. Series at 1,000 nodes: one simulated 8x H200 node's dcgm-exporter page is counted
   as it is, and with the opt-in `hpc_job` label (exporters.hpcjob) on every GPU;
   the master's `mac_gpu_job_info` counted from a real /metrics with 8,000 held GPUs
   (1,000 nodes x 8) in a throwaway database; each at one instant and as distinct
   series over 24 h of 1-hour jobs (a new job id is a new series).
3. Job page: a 64-GPU job (8 nodes x 8) that ran 24 h, its samples (15 s apart)
   imported into Debian's VictoriaMetrics; `build_report()` timed (median of 5),
   beside one node page chart of 24 h on the same store as the baseline.

Needs root, Debian's Slurm, MariaDB, PostgreSQL, victoria-metrics.
Run: ``.venv/bin/python -m bench.slurm_jobs [--runs 5] [--no-write]`` (about 3 min).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.benchdb import bench_database
from bench.report import median, update_section
from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.slurmlab import SlurmLab, ensure_users, lab_folder
from testkit.waiting import wait_for, wait_http

NODES, GPUS = 10, 8
JOB_COUNTS = (0, 40, 80)
CALLS = 10
HOURS = 24
STEP = 15
JOB_NODES = 8


def read_cost(runs: int) -> dict[int, tuple[float, float]]:
    """{jobs: (squeue ms, sacct ms)}, medians over `CALLS` calls."""
    from scheduler.slurm import SlurmClient

    ensure_users()
    found: dict[int, tuple[float, float]] = {}
    with lab_folder() as root:
        lab = SlurmLab.start(root, [f"node-{i}" for i in range(NODES)], GPUS, accounting=True)
        try:
            client = SlurmClient(lab.conf)
            since = datetime.now(UTC) - timedelta(hours=1)
            running = 0
            for count in JOB_COUNTS:
                while running < count:
                    lab.submit(gpus=1, seconds=900)
                    running += 1
                wait_for(
                    lambda c=count: len(lab.squeue("-h", "-t", "running").splitlines()) == c,
                    60, 0.2, what=f"{count} jobs running",
                )  # fmt: skip
                squeue, sacct = [], []
                for _ in range(CALLS * runs):
                    started = time.perf_counter()
                    jobs = client.jobs()
                    squeue.append(time.perf_counter() - started)
                    assert sum(len(j.gpus) for j in jobs) == count
                    started = time.perf_counter()
                    client.accounting_jobs(since)
                    sacct.append(time.perf_counter() - started)
                found[count] = (median(squeue) * 1000, median(sacct) * 1000)
        finally:
            lab.stop()
    return found


def dcgm_series() -> tuple[int, int]:
    """(series of one 8-GPU node's dcgm-exporter page, the same with hpc_job on every GPU)."""
    from prometheus_client.parser import text_string_to_metric_families

    from exporters.hpcjob import with_hpc_job
    from testkit.simfleet import FleetThread, loopback_base

    fleet = FleetThread(1, base=loopback_base(), profiles="nvidia=1", fault_rate=0).start()
    try:
        node = fleet.nodes[0]
        port = node.exporters()["dcgm-exporter"]
        with urllib.request.urlopen(f"http://{node.ip}:{port}/metrics", timeout=5) as page:
            text = page.read().decode()
    finally:
        fleet.stop()
    families = list(text_string_to_metric_families(text))
    plain = sum(len(f.samples) for f in families)
    gpu_series = sum(1 for f in families for s in f.samples if "gpu" in s.labels)
    mapping = {str(gpu): ("4242",) for gpu in range(GPUS)}
    labelled = with_hpc_job(list(text_string_to_metric_families(text)), mapping)
    assert sum(len(f.samples) for f in labelled) == plain  # one job a GPU: same count now
    return plain, gpu_series


def collect_ms() -> tuple[float, list]:
    from healthcheck.metrics import master_registry

    times, families = [], []
    for _ in range(5):
        started = time.perf_counter()
        families = list(master_registry().collect())
        times.append(time.perf_counter() - started)
    return median(times) * 1000, families


def job_info_series(nodes: int) -> tuple[int, float, float]:
    """(mac_gpu_job_info series on the master's /metrics with `nodes` x 8 GPUs held, ms
    to collect the master's registry with them, the same without a job: the baseline)."""
    from django.utils import timezone

    from inventory.models import GpuHealth, Node
    from scheduler.models import Job, JobGpu

    now = timezone.now()
    Node.objects.bulk_create(
        [Node(hostname=f"gpu-{i:04d}", ip=f"10.{i // 250}.{i % 250}.1") for i in range(nodes)]
    )
    ids = list(Node.objects.order_by("id").values_list("id", flat=True))
    GpuHealth.objects.bulk_create(
        [GpuHealth(node_id=n, index=g, uuid=f"GPU-{n}-{g}") for n in ids for g in range(GPUS)]
    )
    baseline, _ = collect_ms()
    Job.objects.bulk_create(
        [Job(job_id=1000 + i, user="alice", partition="gpu", state="RUNNING", started=now)
         for i in range(nodes)]
    )  # fmt: skip
    jobs = dict(Job.objects.values_list("job_id", "id"))
    JobGpu.objects.bulk_create(
        [JobGpu(job_id=jobs[1000 + i], node_id=n, slurm_node=f"gpu-{i:04d}", index=g, since=now)
         for i, n in enumerate(ids) for g in range(GPUS)],
        batch_size=2000,
    )  # fmt: skip
    with_jobs, families = collect_ms()
    count = sum(len(f.samples) for f in families if f.name == "mac_gpu_job_info")
    return count, with_jobs, baseline


def start_store(work: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        ["victoria-metrics", f"-storageDataPath={work}", f"-httpListenAddr=127.0.0.1:{port}",
         "-retentionPeriod=2d", "-loggerLevel=ERROR", "-search.latencyOffset=0s"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", process=proc)
    return proc, url


def import_job_samples(url: str, node_ids: list[int], end: float) -> int:
    """24 h of four GPU metrics for 8 GPUs of each node, as the store's JSON lines."""
    import json

    start = end - HOURS * 3600
    stamps = [int((start + k * STEP) * 1000) for k in range(int(HOURS * 3600 / STEP) + 1)]
    names = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
             "DCGM_FI_DEV_GPU_TEMP")  # fmt: skip
    lines, samples = [], 0
    for node in node_ids:
        for gpu in range(GPUS):
            for name in names:
                values = [50 + (k + gpu) % 50 for k in range(len(stamps))]
                metric = {"__name__": name, "node": str(node), "gpu": str(gpu), "Hostname": "x"}
                lines.append(json.dumps({"metric": metric, "values": values, "timestamps": stamps}))
                samples += len(stamps)
    body = ("\n".join(lines) + "\n").encode()
    request = urllib.request.Request(f"{url}/api/v1/import", data=body, method="POST")
    urllib.request.urlopen(request, timeout=120).close()
    urllib.request.urlopen(f"{url}/internal/force_flush", timeout=30).close()
    return samples


def job_page_latency(runs: int, work: Path) -> tuple[float, float, int]:
    """(job report ms, one node chart ms of 24 h, samples imported)."""
    from django.conf import settings
    from django.utils import timezone

    from inventory.choices import GpuVendor
    from inventory.models import Node
    from macweb.dashboard import charts
    from macweb.dashboard.jobreport import build_report
    from scheduler.models import Job, JobGpu

    nodes = [
        Node.objects.create(hostname=f"job-node-{i}", ip=f"10.200.0.{i + 1}",
                            gpu_vendor=GpuVendor.NVIDIA, exporters={"dcgm-exporter": 29150})
        for i in range(JOB_NODES)
    ]  # fmt: skip
    end = time.time()
    proc, url = start_store(work)
    try:
        samples = import_job_samples(url, [n.pk for n in nodes], end)
        settings.PROMETHEUS_URL = url
        ended = datetime.fromtimestamp(end, UTC)
        job = Job.objects.create(
            job_id=99_000_001, user="alice", partition="gpu", state="COMPLETED",
            started=ended - timedelta(hours=HOURS), ended=ended, gpu_count=JOB_NODES * GPUS,
            nodes=[n.hostname for n in nodes],
        )  # fmt: skip
        JobGpu.objects.bulk_create(
            [JobGpu(job=job, node=n, slurm_node=n.hostname, index=g, since=job.started,
                    until=ended) for n in nodes for g in range(GPUS)]
        )  # fmt: skip
        report = build_report(job, now=timezone.now())
        points = sum(v is not None for c in report.charts for s in c["series"] for v in s["values"])
        assert len(report.charts[0]["series"]) == JOB_NODES * GPUS and points, report.summary
        page, chart = [], []
        for _ in range(runs):
            started = time.perf_counter()
            build_report(job)
            page.append(time.perf_counter() - started)
            started = time.perf_counter()
            asyncio.run(charts.chart_data(nodes[0], charts.CHARTS["gpu_util"], "24h"))
            chart.append(time.perf_counter() - started)
        return median(page) * 1000, median(chart) * 1000, samples
    finally:
        stop_process(proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print, do not update the docs")
    args = parser.parse_args(argv)
    costs = read_cost(max(1, args.runs // 5))
    plain, gpu_series = dcgm_series()
    with bench_database("bench_jobs"):
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")
        django.setup()
        info, collect_jobs_ms, collect_base_ms = job_info_series(1000)
        import tempfile

        with tempfile.TemporaryDirectory() as work:
            page_ms, chart_ms, samples = job_page_latency(args.runs, Path(work))
    fleet = 1000
    base = plain * fleet
    info_day = info * HOURS
    hpc_day = base + gpu_series * fleet * (HOURS - 1)
    rows = "\n".join(
        f"| {jobs} | {squeue:.0f} ms | {sacct:.0f} ms |" for jobs, (squeue, sacct) in costs.items()
    )
    body = f"""
One central read per sweep, {NODES}-node lab (Debian's Slurm 22.05, {GPUS} GPUs a node,
slurmdbd), one-GPU jobs running; medians of {CALLS * max(1, args.runs // 5)} calls:

| running GPU jobs | `squeue --json`, parsed with GPU indexes | `sacct`, last hour |
|---:|---:|---:|
{rows}

Series at {fleet:,} simulated 8-GPU nodes (dcgm-exporter's page of one simulated H200
node: {plain} series, {gpu_series} of them per GPU):

| mode | series now | distinct series over 24 h of 1-hour jobs |
|---|---:|---:|
| no attribution | {base:,} | {base:,} |
| `mac_gpu_job_info` (default) | {base + info:,} (+{info:,}) | {base + info_day:,} (+{info_day:,}) |
| `hpc_job` label (opt-in) | {base:,} | {hpc_day:,} (x{hpc_day / base:.1f}) |

The master's /metrics registry (1,000 nodes) collects in {collect_jobs_ms:.0f} ms with
{info:,} held GPUs, {collect_base_ms:.0f} ms without any job (baseline; median of 5 each).

Job page of a 64-GPU job ({JOB_NODES} nodes x {GPUS}) that ran 24 h, {samples:,} samples
in Debian's VictoriaMetrics: `build_report()` {page_ms:.0f} ms (4 charts x 64 series,
median of {args.runs}); one node page chart of 24 h on the same store (baseline)
{chart_ms:.0f} ms.

Load average at the end: {", ".join(f"{x:.2f}" for x in os.getloadavg())}. The machine
({os.cpu_count()} CPUs) was shared with other lanes' tests during the run: times are upper bounds.
"""
    print(body)
    if not args.no_write:
        update_section("slurm_jobs", "Slurm jobs on GPUs: read cost, series, job page", body)
        print("wrote docs/benchmarks.md (section slurm_jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
