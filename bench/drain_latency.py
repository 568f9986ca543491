"""Benchmark: time from a GPU fault to the node's DRAIN in Slurm, at two probe intervals.

What runs, all real: `mac start master` (process runtime: gunicorn, Celery worker and
beat, Debian's Prometheus and Alertmanager) with MAC_SLURM_DRAIN=on, a Slurm 22.05 lab
(testkit.slurmlab: munge, slurmctld, one slurmd per node) whose NodeNames are the host
names of a simulated fleet of 8x H200 nodes (testkit.simfleet), and Slurm's own sinfo
to watch it. Each run injects XID 79 on GPU 3 of one node, at a random moment of the
probe interval, and records from that moment:

1. the node unhealthy in MAC's inventory (its health_since, from the API): the sweep
   that reads the verdict, one MAC_PROBE_INTERVAL at most plus the probe. The
   baseline: MAC's own detection;
2. MAC's drain recorded in the node's history (the slurm_drain event's time): the drain
   pass the sweep queued, and its scontrol update;
3. the node DRAIN in Slurm, as `sinfo` shows it (polled every 0.1 s).

Each run drains another node, so MAC_DRAIN_BUDGET is 100% here (the budget is not what
is measured). Two masters run one after the other: MAC_PROBE_INTERVAL=5 and every
setting at its default (interval 30 s, MAC_PROBE_TIMEOUT 3 s).

    flock /tmp/mac-bench.lock .venv/bin/python -m bench.drain_latency [--runs 5] [--intervals 5,30]

Needs root, Debian's Slurm and munge, prometheus and prometheus-alertmanager, and Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.report import median, update_section, verdict
from contract.settings import CATALOG
from testkit.alertstack import AlertStack
from testkit.ports import free_port
from testkit.simfleet import Fault, FleetThread, loopback_base, register_fleet
from testkit.slurmlab import SlurmLab, lab_folder
from testkit.waiting import wait_for

DEFAULT_INTERVAL = CATALOG["MAC_PROBE_INTERVAL"].default
PROBE_TIMEOUT = CATALOG["MAC_PROBE_TIMEOUT"].default  # the stack leaves it at its default
SLACK = 5.0  # the bound: interval + timeout + 5 s


@dataclass
class Run:
    unhealthy: float  # seconds from the fault: MAC's inventory has the verdict
    recorded: float  # the drain in the node's history
    drained: float  # DRAIN in Slurm (sinfo)
    reason: str


def _iso(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def slurm_state(lab: SlurmLab, host: str) -> tuple[str, str]:
    out = lab.sinfo("-h", "-N", "-n", host, "-o", "%T|%E").strip()
    state, _, reason = out.partition("|")
    return state, reason


def one_run(lab: SlurmLab, fleet: FleetThread, admin, node_id: int, index: int,
            interval: float) -> Run:  # fmt: skip
    node = fleet.nodes[index]
    time.sleep(random.uniform(0, interval))  # a random moment of the interval
    fleet.inject(node.ip, Fault.XID, 3, 79)
    injected = time.time()
    deadline = time.monotonic() + 10 * interval + 60
    while True:
        state, reason = slurm_state(lab, node.hostname)
        if state.startswith("drain"):
            drained = time.time()
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node.hostname} not DRAIN within {10 * interval + 60:g} s")
        time.sleep(0.1)
    row = wait_for(
        lambda: (
            (found := admin.get_json(f"/api/v1/nodes/{node_id}/"))["events"]
            and any(e["kind"] == "slurm_drain" for e in found["events"])
            and found
        ),
        timeout=60,
        what=f"the drain in {node.hostname}'s history",
    )
    event = next(e for e in row["events"] if e["kind"] == "slurm_drain")
    return Run(
        _iso(row["health_since"]) - injected,
        _iso(event["created_at"]) - injected,
        drained - injected,
        reason,
    )


def measure(interval: float, runs: int) -> list[Run]:
    """`runs` faults, each on its own node, on one master at probe interval `interval`."""
    fleet = FleetThread(
        runs, base=loopback_base(), profiles="nvidia=1", fault_rate=0, evidence_window=3600
    ).start()
    results = []
    try:
        with lab_folder() as lab_root, tempfile.TemporaryDirectory(prefix="mac-drain-") as root:
            lab = SlurmLab.start(lab_root, [node.hostname for node in fleet.nodes], 8)
            settings = {
                "MAC_SLURM_DRAIN": "on",
                "MAC_DRAIN_BUDGET": "100%",
                "SLURM_CONF": str(lab.conf),
                # No fixed port at all: the bench runs beside other masters.
                "MAC_API_INTERNAL_PORT": str(free_port()),
            }
            if interval != DEFAULT_INTERVAL:
                settings["MAC_PROBE_INTERVAL"] = f"{interval:g}"
            stack = AlertStack(Path(root), settings)
            try:
                stack.start()
                asyncio.run(register_fleet(fleet.fleet, stack.url))
                hosts = {node.hostname for node in fleet.nodes}
                wait_for(
                    lambda: (
                        set(stack.node_up()) >= hosts
                        and all(stack.node_up()[h] == 1.0 for h in hosts)
                    ),
                    timeout=300,
                    what="the fleet Online",
                )
                admin = stack.admin()
                ids = {n["hostname"]: n["id"] for n in admin.get_json("/api/v1/nodes/")["results"]}
                for index in range(runs):
                    run = one_run(lab, fleet, admin, ids[fleet.nodes[index].hostname], index,
                                  interval)  # fmt: skip
                    print(f"interval {interval:g}, run {index + 1}: {run}", flush=True)
                    results.append(run)
            finally:
                stack.stop()
                lab.stop()
    finally:
        fleet.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--intervals", default="5,30", help="probe intervals, comma-separated")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--note", default="", help="what else ran on the machine meanwhile, for the report"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    measured = {
        float(interval): measure(float(interval), args.runs)
        for interval in args.intervals.split(",")
    }
    report(measured, args, load_before, os.getloadavg()[0])


def report(measured: dict[float, list[Run]], args, load_before: float, load_after: float) -> None:
    def row(name: str, values: list[float]) -> str:
        return f"| {name} | {median(values):.1f} | {min(values):.1f} | {max(values):.1f} |"

    parts = [
        "XID 79 injected on GPU 3 of one simulated 8x H200 node at a random moment of the "
        f"probe interval, {args.runs} runs per setting, each on another node; `mac start "
        "master` runs everything (process runtime) with MAC_SLURM_DRAIN=on at a Slurm "
        "22.05 lab of the fleet's host names (testkit.slurmlab), MAC_DRAIN_BUDGET=100% so "
        "that every run drains, every other setting at MAC's default except "
        "MAC_PROBE_INTERVAL as named. DRAIN is read with Slurm's own sinfo every 0.1 s. "
        f"The machine's 1-minute load average was {load_before:.1f} before the runs and "
        f"{load_after:.1f} after. {args.note}".strip(),
    ]
    for interval, runs in measured.items():
        drained = [r.drained for r in runs]
        limit = interval + PROBE_TIMEOUT + SLACK
        parts += [
            "",
            f"**MAC_PROBE_INTERVAL={interval:g}**",
            "",
            "| seconds from the fault | median | min | max |",
            "|---|---:|---:|---:|",
            row("unhealthy in MAC's inventory (baseline: MAC's own detection)",
                [r.unhealthy for r in runs]),
            row("the drain in the node's history (the pass ran scontrol)",
                [r.recorded for r in runs]),
            row("**DRAIN in Slurm** (sinfo)", drained),
            "",
            f"- Fault to DRAIN: median **{median(drained):.1f} s**, max **{max(drained):.1f} s**; "
            f"the drain pass after the verdict took "
            f"{median([r.drained - r.unhealthy for r in runs]):.1f} s (median).",
            verdict(
                f"DRAIN within interval + timeout + 5 s ({limit:g} s)",
                f"the worst of {len(runs)} runs", max(drained), limit, " s",
            ),
            f"- A reason MAC wrote: `{runs[0].reason}`",
        ]  # fmt: skip
    body = "\n".join(parts)
    print(body)
    if not args.no_write:
        update_section("drain-latency", "Slurm: time from a GPU fault to DRAIN", body)


if __name__ == "__main__":
    main()
