"""Benchmark: what the Slurm lab costs, and how fast each way of finding a finished job is.

The lab (testkit.slurmlab) runs real Slurm 22.05 daemons; tests start it per module and
issue 32's budget test needs 20 nodes, so its start time and footprint matter:
- start: from `SlurmLab.start()` to every node idle, with 3 nodes (with and without
  slurmdbd) and with 20 nodes;
- footprint of the 20-node lab, idle: RSS and PSS per kind of daemon (PSS shares the
  slurmd binary's pages among the 20), and the CPU all daemons use over 20 s idle.

And for the choice of how MAC finds jobs that start and end between two reads
(docs/slurm.md), in a 3-node lab with slurmdbd:
- the time `squeue --json`, `sinfo --json` and `sacct` take (median of 10 calls each);
- after a 1 s job ends (slurmctld reports it COMPLETED), how long until sacct has its
  end time (slurmctld sends job records to slurmdbd asynchronously);
- slurmdbd's RSS.

Several runs, fresh labs each, medians. Needs root, Debian's Slurm and MariaDB
(scripts/bootstrap). Run: ``.venv/bin/python -m bench.slurm_lab [--runs 3] [--no-write]``
(about 3 min).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import psutil

from bench.report import median, update_section
from testkit.slurmlab import DAEMON_MARKER, SlurmLab, lab_folder
from testkit.waiting import wait_for

IDLE_SECONDS = 20.0
CALLS = 10


def timed_start(root: Path, nodes: int, accounting: bool) -> tuple[SlurmLab, float]:
    started = time.monotonic()
    lab = SlurmLab.start(root, [f"node-{i}" for i in range(1, nodes + 1)], 4, accounting=accounting)
    return lab, time.monotonic() - started


def daemons(lab: SlurmLab) -> list[psutil.Process]:
    marker = str(lab.root)
    found = []
    for process in psutil.process_iter(["name"]):
        try:
            if process.environ().get(DAEMON_MARKER) == marker and process.status() != "zombie":
                found.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
    return found


def footprint(lab: SlurmLab) -> dict:
    """RSS and PSS by program, and CPU over IDLE_SECONDS, of an idle lab."""
    processes = daemons(lab)
    memory: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for process in processes:
        info = process.memory_full_info()
        memory[process.name()].append((info.rss, info.pss))
    before = {p.pid: sum(p.cpu_times()[:2]) for p in processes}
    time.sleep(IDLE_SECONDS)
    used = sum(sum(p.cpu_times()[:2]) - before[p.pid] for p in processes if p.is_running())
    return {"memory": dict(memory), "cpu": used / IDLE_SECONDS}


def call_time(lab: SlurmLab, *argv: str) -> float:
    times = []
    for _ in range(CALLS):
        started = time.monotonic()
        subprocess.run(argv, env=lab.env, capture_output=True, check=True, timeout=30)
        times.append(time.monotonic() - started)
    return median(times)


def accounting_lag(lab: SlurmLab) -> float:
    """Seconds from slurmctld reporting a 1 s job COMPLETED to sacct having its end."""
    job = lab.submit(seconds=1, gpus=1, node="node-1")
    lab.wait_job(job, "RUNNING")
    wait_for(lambda: lab.job_state(job) == "COMPLETED", 30, 0.02, what=f"job {job} done")
    ended = time.monotonic()
    wait_for(
        lambda: lab.sacct("-n", "-X", "-o", "End", "-j", str(job)).strip()[:1].isdigit(),
        30,
        0.02,
        what=f"job {job}'s end in sacct",
    )
    return time.monotonic() - ended


def one_run() -> dict:
    result: dict = {}
    with lab_folder() as root:
        lab, result["start_3"] = timed_start(root, 3, accounting=False)
        lab.stop()
    with lab_folder() as root:
        lab, result["start_3_dbd"] = timed_start(root, 3, accounting=True)
        with lab:
            result["squeue"] = call_time(lab, "squeue", "--json")
            result["sinfo"] = call_time(lab, "sinfo", "--json")
            result["sacct"] = call_time(lab, "sacct", "-a", "-X", "-P", "-n")
            result["lag"] = accounting_lag(lab)
            dbd = [p for p in daemons(lab) if p.name() == "slurmdbd"]
            result["dbd_rss"] = sum(p.memory_info().rss for p in dbd)
    with lab_folder() as root:
        lab, result["start_20"] = timed_start(root, 20, accounting=False)
        with lab:
            result["footprint"] = footprint(lab)
    return result


def mib(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"


def report(runs: list[dict]) -> str:
    def med(key: str) -> float:
        return median([run[key] for run in runs])

    lines = [
        f"{len(runs)} runs, fresh labs each (Debian's Slurm 22.05, 4 GPUs per node); medians.",
        "",
        "| lab | start (to every node idle) |",
        "|---|---:|",
        f"| 3 nodes | {med('start_3'):.2f} s |",
        f"| 3 nodes with slurmdbd (fresh database) | {med('start_3_dbd'):.2f} s |",
        f"| 20 nodes | {med('start_20'):.2f} s |",
        "",
        f"20-node lab, idle ({IDLE_SECONDS:g} s):",
        "",
        "| program | processes | RSS each | RSS in all | PSS in all |",
        "|---|---:|---:|---:|---:|",
    ]
    programs = sorted({name for run in runs for name in run["footprint"]["memory"]})
    for name in programs:
        entries = [run["footprint"]["memory"].get(name, []) for run in runs]
        count = median([len(entry) for entry in entries])
        rss_each = median([rss for entry in entries for rss, _ in entry])
        rss_all = median([sum(rss for rss, _ in entry) for entry in entries])
        pss_all = median([sum(pss for _, pss in entry) for entry in entries])
        lines.append(f"| {name} | {count:g} | {mib(rss_each)} | {mib(rss_all)} | {mib(pss_all)} |")
    cpu = median([run["footprint"]["cpu"] for run in runs])
    lines += [
        "",
        f"CPU of all the lab's daemons together, idle: {cpu * 100:.2f} % of one core.",
        "",
        "Finding jobs (3-node lab with slurmdbd, median of "
        f"{CALLS} calls each): `squeue --json` {med('squeue') * 1000:.0f} ms, "
        f"`sinfo --json` {med('sinfo') * 1000:.0f} ms, `sacct` {med('sacct') * 1000:.0f} ms. "
        f"A finished job is in slurmctld's answer (squeue) at once; sacct has its end "
        f"{med('lag'):.2f} s after slurmctld reports it done. slurmdbd: {mib(med('dbd_rss'))} RSS.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print, do not update the docs")
    parser.add_argument("--note", default="", help="a line about the run, written below it")
    args = parser.parse_args(argv)
    runs = []
    for index in range(args.runs):
        print(f"run {index + 1}/{args.runs}", flush=True)
        runs.append(one_run())
    load = ", ".join(f"{value:.2f}" for value in psutil.getloadavg())
    body = f"{report(runs)}\n\nLoad average at the end: {load}. {args.note}".rstrip()
    print(body)
    if not args.no_write:
        update_section("slurm_lab", "Slurm lab: start, footprint, finding finished jobs", body)
        print("wrote docs/benchmarks.md (section slurm_lab)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
