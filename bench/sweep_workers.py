"""Benchmark of sharded sweeps: 1, 2 and 4 Celery worker processes sharing one fleet.

What runs: the simulated fleet of bench.sweep (child processes, 5,000 nodes each, two
probes per node, 10 % of the nodes black-holed on both ports), a PostgreSQL database
created for the run, and for each worker count W real `celery worker --pool=solo`
processes consuming the default queue and a probe queue of the run. Each sweep is a
real `probe_fleet` message (force=True) split into `--chunks` chunk tasks
(MAC_SWEEP_CHUNK_SIZE = nodes / chunks), and ends when its finishing task has recorded
it. Measured per sweep: wall time from the message to the recorded finish, CPU time of
all worker processes (the fleet's and PostgreSQL's are not counted), and the finishing
step's share.

Baseline, in the same run, alternating with the worker sweeps: healthcheck.sweep.run_sweep
over the same nodes in this process, i.e. the whole sweep on one process as before.

The projection (see project()): from the one-worker run, a chunk's wall is a fixed
wait (the probe timeout of its dead nodes) plus CPU linear in its nodes; 100,000
nodes in chunks of the default 10,000 within the 30 s interval need the workers that
do those chunks in what the finishing step (linear in nodes) leaves of 30 s.

    .venv/bin/python -m bench.sweep_workers [--nodes 10000] [--chunks 4] [--runs 3]

Uses MAC_BENCH_DATABASE_URL like bench.sweep, MAC_REDIS_URL (default redis db 2) and
loopback 127.80.0.0 upwards for the fleet.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.benchdb import bench_database, sweep_state_cleared
from bench.report import update_section
from bench.sweep import create_nodes, fleet_layout, measure, start_fleet

REPO = Path(__file__).resolve().parent.parent
CELERY = str(Path(sys.executable).with_name("celery"))
FLEET_OCTET = 80
PROJECTED_NODES, INTERVAL = 100_000, 30.0
DEFAULT_CHUNK = 10_000  # MAC_SWEEP_CHUNK_SIZE's default (macweb/settings.py)


def start_workers(count: int, env: dict, log_dir: Path) -> list[subprocess.Popen]:
    workers = []
    for index in range(count):
        log = open(log_dir / f"worker-{count}-{index}.log", "wb")  # noqa: SIM115 - the worker's
        workers.append(
            subprocess.Popen(
                [CELERY, "-A", "macweb", "worker", "--pool=solo", "-l", "warning",
                 "-n", f"bench-{index}@%h", "-Q", f"celery,{env['MAC_PROBE_QUEUE']}",
                 "--without-heartbeat", "--without-gossip", "--without-mingle"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
    time.sleep(1.0)
    return workers


def wait_ready(workers: list[subprocess.Popen], timeout: float = 60) -> None:
    """A worker is ready once it consumes: ping each one through the broker."""
    from macweb.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=1.0) or []
        if len(replies) >= len(workers):
            return
        if any(worker.poll() is not None for worker in workers):
            raise SystemExit("a worker exited at start-up; see its log in the run's folder")
    raise SystemExit(f"the workers were not ready within {timeout:g} s")


def cpu_seconds(workers: list[subprocess.Popen]) -> float:
    total = 0.0
    for worker in workers:
        times = psutil.Process(worker.pid).cpu_times()
        total += times.user + times.system
    return total


def sharded_sweep(workers: list[subprocess.Popen], timeout: float) -> dict:
    """One probe_fleet through the broker; wall until its finishing step recorded it."""
    from healthcheck.state import get_redis, last_sweep, sweep_count
    from healthcheck.tasks import probe_fleet

    client = get_redis()
    before, cpu = sweep_count(client), cpu_seconds(workers)
    wall = time.perf_counter()
    probe_fleet.apply_async(kwargs={"force": True})
    deadline = time.monotonic() + timeout
    while sweep_count(client) == before:
        if time.monotonic() > deadline:
            raise SystemExit(f"no sweep finished within {timeout:g} s")
        time.sleep(0.01)
    wall = time.perf_counter() - wall
    stats = last_sweep(client)
    return {
        "wall": wall,
        "cpu": cpu_seconds(workers) - cpu,
        "chunks": stats["chunks"],
        "finish": stats["finished_at"] - stats["started_at"] - stats["probe_duration"],
        "offline": stats["offline"],
    }


def bench_workers(count: int, runs: int, env: dict, log_dir: Path, dead: int) -> dict:
    from healthcheck.sweep import run_sweep

    workers = start_workers(count, env, log_dir)
    baseline, sweeps = [], []
    try:
        wait_ready(workers)
        sharded_sweep(workers, 120)  # warm-up: imports, connections, first writes
        for _ in range(runs):
            baseline.append(measure(run_sweep))
            sweeps.append(sharded_sweep(workers, 120))
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)
    wrong = sum(s["offline"] != dead for s in sweeps)
    return {"workers": count, "baseline": baseline, "sweeps": sweeps, "wrong": wrong, "dead": dead}


def report(results: list[dict], args, load: tuple[float, ...]) -> str:
    from bench.report import median

    size = args.nodes // args.chunks
    lines = [
        f"{args.nodes:,} simulated nodes (`testkit.simfleet`), two probes each, "
        f"{results[0]['dead'] / args.nodes:.0%} black-holed "
        f"on both ports, probe timeout {args.timeout:g} s; the sweep split into {args.chunks} "
        f"chunks of {size:,} nodes (`MAC_SWEEP_CHUNK_SIZE={size}`) shared by W real Celery "
        "worker processes (`--pool=solo`), started by a real `probe_fleet` message and ended "
        "by its finishing task. Baseline: `run_sweep` in one process over the same nodes, "
        f"alternating with the worker sweeps. Medians of {args.runs} runs per W. CPU is the "
        "workers' own (PostgreSQL's and the fleet's are not counted).",
        "",
        "| workers | sweep wall (s) | nodes/s | workers' CPU (s) | nodes per CPU-second "
        "| finishing step (s) | baseline wall (s) | baseline nodes/s | baseline CPU (s) "
        "| baseline nodes per CPU-second |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        wall = median([s["wall"] for s in r["sweeps"]])
        cpu = median([s["cpu"] for s in r["sweeps"]])
        base_wall = median([m["wall"] for m in r["baseline"]])
        base_cpu = median([m["cpu"] for m in r["baseline"]])
        r.update(wall=wall, cpu=cpu, finish=median([s["finish"] for s in r["sweeps"]]))
        lines.append(
            f"| {r['workers']} | {wall:.2f} | {args.nodes / wall:,.0f} | {cpu:.2f} "
            f"| {args.nodes / cpu:,.0f} | {r['finish']:.2f} | {base_wall:.2f} "
            f"| {args.nodes / base_wall:,.0f} | {base_cpu:.2f} | {args.nodes / base_cpu:,.0f} |"
        )
    one = results[0]
    projection = project(one["wall"] / args.chunks, one["cpu"] / args.chunks, size, one["finish"],
                         args.nodes)  # fmt: skip
    wrong = sum(r["wrong"] for r in results)
    lines += [
        "",
        f"- Projection for {PROJECTED_NODES:,} nodes within the {INTERVAL:g} s interval, from "
        f"the one-worker run: a chunk costs {projection['floor']:.2f} s of waiting (the "
        f"timeout of its black-holed nodes, the database) plus CPU at "
        f"{projection['npcs']:,.0f} nodes per CPU-second; the finishing step, linear in "
        f"nodes, grows to {projection['finish']:.1f} s. With the default "
        f"`MAC_SWEEP_CHUNK_SIZE={DEFAULT_CHUNK}` a chunk takes {projection['chunk']:.1f} s, "
        "so a worker "
        f"does {projection['rounds']} chunks in the {projection['budget']:.1f} s left: "
        f"**{projection['workers']} workers** for the {projection['chunks']} chunks, each on a "
        f"core of its own ({projection['cpu']:.0f} CPU-seconds of probing in all).",
        f"- Sweeps where the Offline count differed from the black-holed nodes: **{wrong}**.",
        "",
        f"Load average before the run: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        f"(1/5/15 min); fleet, workers and PostgreSQL share this machine's "
        f"{os.cpu_count()} cores. The projection assumes one core per worker.",
    ]
    return "\n".join(lines)


def project(chunk_wall: float, chunk_cpu: float, size: int, finish: float, nodes: int) -> dict:
    """Workers that sweep PROJECTED_NODES within INTERVAL, chunked by the default size.

    A chunk's wall is its waiting (measured wall minus CPU: the probe timeout of its dead
    nodes, database round trips), about constant, plus CPU linear in its nodes.
    """
    npcs = size / chunk_cpu
    floor = max(0.0, chunk_wall - chunk_cpu)
    chunk_size = DEFAULT_CHUNK
    chunk = floor + chunk_size / npcs
    finish_big = finish * PROJECTED_NODES / nodes
    budget = INTERVAL - finish_big
    chunks = math.ceil(PROJECTED_NODES / chunk_size)
    rounds = max(1, math.floor(budget / chunk)) if budget > chunk else 0
    return {
        "npcs": npcs,
        "floor": floor,
        "chunk": chunk,
        "finish": finish_big,
        "budget": budget,
        "chunks": chunks,
        "rounds": rounds,
        "workers": math.ceil(chunks / rounds) if rounds else "no number of",
        "cpu": PROJECTED_NODES / npcs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sweep_workers", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3.0, help="probe timeout (s)")
    parser.add_argument("--concurrency", type=int, default=4000)
    parser.add_argument("--no-report", action="store_true", help="print, do not touch docs/")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="mac-bench-workers-"))
    os.environ.update(
        MAC_DATA_DIR=str(tmp),
        MAC_SD_DIR=str(tmp / "targets"),
        MAC_PROBE_TIMEOUT=str(args.timeout),
        MAC_PROBE_CONCURRENCY=str(args.concurrency),
        MAC_PROBE_INTERVAL=str(INTERVAL),
        MAC_SWEEP_CHUNK_SIZE=str(max(1, args.nodes // args.chunks)),
        MAC_PROBE_QUEUE=f"mac-bench-probe-{os.getpid()}",
        MAC_LOG_LEVEL="WARNING",
    )
    os.environ.setdefault("MAC_REDIS_URL", "redis://127.0.0.1:6379/2")
    load = os.getloadavg()
    fleet: list[subprocess.Popen] = []
    queue = os.environ["MAC_PROBE_QUEUE"]
    # Dropped last: the database (then the sweep's and the queue's Redis keys).
    stack = contextlib.ExitStack()
    stack.enter_context(sweep_state_cleared(queue, f"_kombu.binding.{queue}"))
    stack.enter_context(bench_database("mac_bench_workers"))
    try:
        addresses, dead = fleet_layout(args.nodes, FLEET_OCTET)
        print(f"starting a simulated fleet of {args.nodes:,} nodes...", flush=True)
        fleet = start_fleet(args.nodes, FLEET_OCTET)
        create_nodes(addresses)
        results = []
        for count in [int(w) for w in args.workers.split(",") if w]:
            print(f"{count} worker(s)...", flush=True)
            results.append(bench_workers(count, args.runs, dict(os.environ), tmp, len(dead)))
        body = report(results, args, load)
        print(body)
        if not args.no_report:
            update_section("sweep_workers", "Sharded sweeps on 1, 2 and 4 workers", body)
    finally:
        for child in fleet:
            child.terminate()
        for child in fleet:
            child.wait(30)
        stack.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
