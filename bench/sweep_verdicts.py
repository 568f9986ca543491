"""Benchmark of the GPU verdicts in the fleet sweep: what reading them costs at 10,000 nodes.

What runs: the simulated fleet (testkit.simfleet) in child processes, 5,000 nodes each,
every node serving sys-exporter, nic-exporter and dcgm-exporter on its own loopback
address (dcgm-exporter answers the sweep's probe query with eight healthy GPUs'
verdicts, as a real one does), every tenth node black-holed on every port. The master
side runs here, against a PostgreSQL database created for the run and dropped after it.

Alternating runs of the same sweep (healthcheck.sweep.run_sweep, everything included):
- without: dcgm-exporter probed as before the verdicts (a plain liveness GET of
  /metrics, its answer only judged), the baseline measured in the same run;
- with: the liveness GET asks for the verdicts (contract.verdicts.VERDICT_QUERY), reads
  them, fingerprints them, and, since nothing changed, parses and writes nothing but the
  nodes' streaks (in the same UPDATE as last_seen).
Plus the first sweep with verdicts: every node's answer is new, so every answer is
parsed and 8 GPU rows per node are written. Wall time, CPU time of this process and its
peak RSS during the call.

    .venv/bin/python -m bench.sweep_verdicts [--size 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.benchdb import bench_database, sweep_state_cleared
from bench.report import median, update_section, verdict
from bench.sweep import REPO, fleet_layout, measure

CHUNK = 5000
OCTET = 90  # the fleet on 127.90.0.0 upwards
SERVICES = "sys-exporter,nic-exporter,dcgm-exporter"
TARGET_RATIO = 1.2  # issue 3's bound on a sweep against its baseline


def start_fleet(total: int) -> list[subprocess.Popen]:
    from bench.sweep import fleet_bases

    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testkit.simfleet",
                "--nodes",
                str(count),
                "--base",
                base,
                "--services",
                SERVICES,
                "--blackhole",
                "0.1",
                "--fault-service",
                "all",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for base, count in fleet_bases(total, OCTET)
    ]
    for child in children:
        for line in child.stdout:
            if line.strip() == "READY":
                break
        else:
            raise SystemExit("the simulated fleet did not start; see its messages above")
    return children


def create_nodes(addresses: list[str]) -> None:
    from inventory.models import GpuHealth, Node, NodeEvent

    NodeEvent.objects.all().delete()
    GpuHealth.objects.all().delete()
    Node.objects.all().delete()
    exporters = {"sys-exporter": 29101, "nic-exporter": 29500, "dcgm-exporter": 29150}
    Node.objects.bulk_create(
        [
            Node(hostname="sim-" + ip.replace(".", "-"), ip=ip, exporters=exporters,
                 gpu_vendor="nvidia", gpu_count=8)
            for ip in addresses
        ],
        batch_size=2000,
    )  # fmt: skip


@contextlib.contextmanager
def verdicts_off():
    """The sweep as before the verdicts: dcgm-exporter's liveness GET without the query."""
    import contract.services
    import healthcheck.verdicts

    plain = dataclasses.replace(contract.services.BY_NAME["dcgm-exporter"], probe_query="")
    saved = contract.services.BY_NAME["dcgm-exporter"], healthcheck.verdicts.VERDICT_SERVICES
    contract.services.BY_NAME["dcgm-exporter"] = plain
    healthcheck.verdicts.VERDICT_SERVICES = ()
    try:
        yield
    finally:
        contract.services.BY_NAME["dcgm-exporter"] = saved[0]
        healthcheck.verdicts.VERDICT_SERVICES = saved[1]


def run(size: int, runs: int) -> dict:
    from healthcheck.sweep import run_sweep
    from inventory.models import GpuHealth

    addresses, _dead = fleet_layout(size, OCTET)
    create_nodes(addresses)
    with verdicts_off():
        run_sweep()  # statuses settle first: both arms then change nothing
    first = measure(run_sweep)
    rows = GpuHealth.objects.count()
    without, with_ = [], []
    for _ in range(runs):
        with verdicts_off():
            without.append(measure(run_sweep))
        with_.append(measure(run_sweep))
    return {"size": size, "first": first, "rows": rows, "without": without, "with": with_}


def report(result: dict, args, load: tuple[float, ...]) -> str:
    def med(arm: str, key: str) -> float:
        return median([m[key] for m in result[arm]])

    ratio = med("with", "wall") / med("without", "wall")
    cpu = med("with", "cpu") - med("without", "cpu")
    lines = [
        f"Simulated fleet of {result['size']:,} nodes (`testkit.simfleet`, {CHUNK:,} per "
        "process) on loopback, three probes per node (sys-exporter, nic-exporter, "
        "dcgm-exporter with eight GPUs), 10% black-holed on every port. Probe timeout "
        f"{args.timeout:g} s. PostgreSQL database created for the run. CPU is this process "
        f"only (the master). Medians of {args.runs} alternating runs of each arm.",
        "",
        "| arm | sweep wall (s) | sweep CPU (s) | peak RSS (MiB) |",
        "|---|---:|---:|---:|",
        f"| without verdicts (dcgm-exporter: plain liveness GET) | {med('without', 'wall'):.2f} "
        f"| {med('without', 'cpu'):.2f} | {med('without', 'mem'):.0f} |",
        f"| with verdicts, nothing changed | {med('with', 'wall'):.2f} | {med('with', 'cpu'):.2f} "
        f"| {med('with', 'mem'):.0f} |",
        f"| first sweep with verdicts (every answer parsed, {result['rows']:,} GPU rows "
        f"written) | {result['first']['wall']:.2f} | {result['first']['cpu']:.2f} "
        f"| {result['first']['mem']:.0f} |",
        "",
        verdict(
            f"{result['size']:,}-node sweep with verdicts within {TARGET_RATIO:g}x the same "
            "sweep without",
            f"the median wall with over the median wall without ({args.runs} runs each)",
            ratio,
            TARGET_RATIO,
        ),
        f"- The verdicts cost the master {cpu:+.2f} s of CPU per sweep (median with minus "
        "median without).",
        "",
        f"Load average before the run: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        "(1/5/15 min); the simulated fleet's processes share these cores with the master.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sweep_verdicts", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--no-report", action="store_true", help="print, do not touch docs/")
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="mac-bench-verdicts-")
    os.environ.update(
        MAC_DATA_DIR=tmp,
        MAC_SD_DIR=str(Path(tmp) / "targets"),
        MAC_PROBE_TIMEOUT=str(args.timeout),
        MAC_PROBE_CONCURRENCY="4000",
    )
    os.environ.setdefault("MAC_REDIS_URL", "redis://127.0.0.1:6379/3")
    load = os.getloadavg()
    fleet: list[subprocess.Popen] = []
    with bench_database("mac_bench_verdicts"), sweep_state_cleared():
        try:
            print(f"starting a simulated fleet of {args.size:,} nodes...", flush=True)
            fleet = start_fleet(args.size)
            result = run(args.size, args.runs)
            body = report(result, args, load)
            print(body)
            if not args.no_report:
                update_section("sweep_verdicts", "GPU verdicts in the sweep", body)
        finally:
            for child in fleet:
                child.terminate()
            for child in fleet:
                child.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
