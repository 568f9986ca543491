"""Benchmark: /health and registration while 64 chart requests wait on a frozen Prometheus.

The scenario of issue 26: four node pages' worth of charts (64 requests at once) sent
while Prometheus is stopped with SIGSTOP. Before the bulkheads, each chart held one of
the API workers' request threads until its 5 s deadline, and /health and registrations
queued behind them. The same scenario runs on two checkouts in the same run, turn
about: the baseline commit (default 0318b7d, main before the bulkheads, unpacked with
`git archive`) and this tree. Each run starts the real serving stack (nginx, gunicorn +
uvicorn, 2 workers of 8 threads; testkit.frontdoor) and a real Prometheus of its own,
freezes Prometheus, sends the 64 charts, and meanwhile times a GET /health and a POST
/api/v1/register (a new host) every 0.2 s for 6 s.

It prints, and writes to its section of docs/benchmarks.md, only what it measured:
per checkout, the median over runs of the /health and registration p99 and of the
slowest chart, and judges the target (/health p99 under 1 s) on this tree's median.

    .venv/bin/python -m bench.bulkheads [--runs 3] [--baseline 0318b7d] [--no-report]

Needs Debian's prometheus and nginx, and Redis (MAC_REDIS_URL, default db 15 of the
local one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.report import median, percentile, update_section, verdict
from testkit.dashboard_servers import start_prometheus_config
from testkit.frontdoor import REPO, Burst, Stack, Stopped, call, sample_front_door, start_stack

CHARTS = 64
SAMPLE_SECONDS = 6.0  # past the charts' 5 s deadline
HEALTH_P99_TARGET = 1.0


@dataclass
class Run:
    checkout: str
    health_p99: float
    register_p99: float
    slowest_chart: float
    charts_503: int
    charts_200: int
    health_errors: int
    register_errors: int


def _unpack(ref: str, into: Path) -> Path:
    """The tree of `ref` (a commit of this repository) in `into`, without a worktree."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref], cwd=REPO, check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _node(stack: Stack) -> int:
    answer = call(
        f"{stack.url}/api/v1/register",
        {"hostname": "bench-frozen-01", "exporters": {"sys-exporter": 29101}},
    )
    if answer.status not in (200, 201):
        raise SystemExit(f"registering the chart's node failed: {answer}")
    return answer.body["id"]


def one_run(name: str, repo: Path, work: Path) -> Run:
    config = {"global": {"scrape_interval": "15s"}, "scrape_configs": []}
    prometheus = start_prometheus_config(config, work / "prometheus")
    stack = start_stack(work / "master", {"MAC_PROMETHEUS_URL": prometheus.url}, repo=repo)
    try:
        chart = f"{stack.url}/nodes/{_node(stack)}/charts/cpu.json"
        cookie = {"Cookie": stack.session()}
        with Stopped(prometheus.proc.pid), Burst(chart, CHARTS, cookie) as burst:
            time.sleep(0.3)  # every chart sent
            door = sample_front_door(stack.url, SAMPLE_SECONDS, prefix=f"bench-{name}")
    finally:
        stack.stop()
        prometheus.stop()
    health, register = door["health"], door["register"]
    return Run(
        checkout=name,
        health_p99=percentile([a.seconds for a in health], 99),
        register_p99=percentile([a.seconds for a in register], 99),
        slowest_chart=max(a.seconds for a in burst.answers),
        charts_503=sum(a.status == 503 for a in burst.answers),
        charts_200=sum(a.status == 200 for a in burst.answers),
        health_errors=sum(a.status != 200 for a in health),
        register_errors=sum(a.status not in (200, 201) for a in register),
    )


def report(runs: list[Run], baseline: str, head: str) -> tuple[str, bool]:
    lines = [
        f"{CHARTS} chart requests (`/nodes/<id>/charts/cpu.json`) sent at once while the "
        "test's own Prometheus is stopped with SIGSTOP; meanwhile one GET /health and one "
        f"POST /api/v1/register (a new host) every 0.2 s for {SAMPLE_SECONDS:g} s. Real "
        "serving stack (nginx, gunicorn + uvicorn, 2 workers, MAC_API_THREADS=8, SQLite "
        f"inventory), loopback. `before` is {baseline} (main before the bulkheads), "
        f"`after` this tree ({head}); runs alternate between them.",
        "",
        "| run | checkout | /health p99 s | register p99 s | slowest chart s | "
        "charts 503 | charts 200 | /health errors | register errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for index, run in enumerate(runs):
        lines.append(
            f"| {index // 2 + 1} | {run.checkout} | {run.health_p99:.2f} | "
            f"{run.register_p99:.2f} | {run.slowest_chart:.2f} | {run.charts_503} | "
            f"{run.charts_200} | {run.health_errors} | {run.register_errors} |"
        )
    lines.append("")
    medians = {}
    for name in ("before", "after"):
        mine = [run for run in runs if run.checkout == name]
        medians[name] = median([run.health_p99 for run in mine])
        lines.append(
            f"- {name}: median /health p99 {medians[name]:.2f} s, median registration p99 "
            f"{median([run.register_p99 for run in mine]):.2f} s, median slowest chart "
            f"{median([run.slowest_chart for run in mine]):.2f} s over {len(mine)} runs"
        )
    lines.append(
        verdict(
            "/health answers in under 1 s at p99 while the charts wait",
            "the median over runs of `after`'s /health p99",
            medians["after"],
            HEALTH_P99_TARGET,
            " s",
        )
    )
    return "\n".join(lines), medians["after"] <= HEALTH_P99_TARGET


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", default="0318b7d")
    parser.add_argument("--no-report", action="store_true", help="print, do not write the doc")
    args = parser.parse_args(argv)
    os.environ.setdefault("MAC_REDIS_URL", "redis://127.0.0.1:6379/15")  # start_stack's Redis
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, check=True, capture_output=True,
        text=True,
    ).stdout.strip()  # fmt: skip
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="mac-bench-bulkheads-") as tmp:
        before = _unpack(args.baseline, Path(tmp) / "before")
        for number in range(args.runs):
            for name, repo in (("before", before), ("after", REPO)):
                run = one_run(name, repo, Path(tmp) / f"{name}-{number}")
                print(run, flush=True)
                runs.append(run)
    body, met = report(runs, args.baseline, head)
    print(body)
    if not args.no_report:
        update_section("bulkheads", "Bulkheads: the front door while Prometheus hangs", body)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
