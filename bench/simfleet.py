"""Simulated fleet: memory and CPU of 1,000 and 10,000 profiled nodes while they are scraped.

What runs: ``python -m testkit.simfleet --nodes N --profiles --seed R`` (the default
mix of NVIDIA, AMD, MangoBoost and CPU nodes; the command splits itself into
several processes where one cannot hold every socket), and a scraper in this
process that fetches every /metrics page of every node (dcgm-exporter,
rocm-exporter, nic-exporter, sys-exporter) over real loopback TCP, one connection
per scrape as Prometheus' first scrape of a target makes, paced at the rate MAC's
15 s scrape interval asks for, with at most ``--concurrency`` in flight. Memory is
the sum of the RSS of every fleet process; CPU the fleet processes' user+system
seconds during the scraping, per wall second (1.0 = one core busy). Several runs
with a fresh fleet each, medians written to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil

from bench.report import median, update_section
from contract.services import BY_NAME
from testkit.simfleet.cli import fleet_layout
from testkit.simfleet.profiles import DEFAULT_MIX

BASE = "127.30.0.0"
SCRAPE_INTERVAL = 15.0  # MAC's Prometheus scrape interval (scraping.promconfig)


@dataclass
class Run:
    nodes: int
    processes: int
    start_s: float
    rss_ready: float
    rss_peak: float
    cpu_cores: float
    scrapes: int
    failed: int
    wanted_per_s: float
    seconds: float
    scraper_cores: float

    @property
    def per_s(self) -> float:
        return self.scrapes / self.seconds

    @property
    def cpu_ms_per_scrape(self) -> float:
        return 1000 * self.cpu_cores * self.seconds / max(self.scrapes, 1)


def fleet_procs(parent: psutil.Process) -> list[psutil.Process]:
    return [parent, *parent.children(recursive=True)]


def rss(procs: list[psutil.Process]) -> float:
    return sum(p.memory_info().rss for p in procs)


def cpu_seconds(procs: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def targets(count: int) -> list[tuple[str, int]]:
    pages = []
    for ip, profile in fleet_layout(count, BASE, DEFAULT_MIX):
        for name in profile.services:
            if BY_NAME[name].liveness_path == "/metrics":
                pages.append((ip, BY_NAME[name].port))
    return pages


async def scrape(ip: str, port: int) -> int:
    reader, writer = await asyncio.open_connection(ip, port)
    writer.write(f"GET /metrics HTTP/1.1\r\nHost: {ip}:{port}\r\n\r\n".encode())
    body = await reader.read()
    writer.close()
    return len(body) if body.startswith(b"HTTP/1.1 200") else -1


async def scrape_for(pages: list[tuple[str, int]], seconds: float, concurrency: int):
    """Scrape the pages round-robin at len(pages)/15 s for ``seconds``; (done, failed)."""
    rate = len(pages) / SCRAPE_INTERVAL
    semaphore = asyncio.Semaphore(concurrency)
    done = failed = 0

    async def one(ip: str, port: int) -> None:
        nonlocal done, failed
        try:
            ok = await asyncio.wait_for(scrape(ip, port), 10) > 0
        except (OSError, TimeoutError):
            ok = False
        finally:
            semaphore.release()
        done += ok
        failed += not ok

    started = time.monotonic()
    tasks = set()
    index = 0
    while time.monotonic() - started < seconds:
        due = started + index / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await semaphore.acquire()  # a slow fleet holds the scraper back: it never piles up
        task = asyncio.create_task(one(*pages[index % len(pages)]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        index += 1
    await asyncio.gather(*tasks)
    return done, failed


def one_run(count: int, seed: int, seconds: float, concurrency: int) -> Run:
    pages = targets(count)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "testkit.simfleet", "--nodes", str(count), "--base", BASE,
         "--profiles", DEFAULT_MIX, "--seed", str(seed)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "READY":
                break
        else:
            raise RuntimeError(f"the fleet exited with {proc.wait()} before READY")
        start_s = time.monotonic() - started
        procs = fleet_procs(psutil.Process(proc.pid))
        rss_ready = rss(procs)
        cpu_before, own_before = cpu_seconds(procs), sum(psutil.Process().cpu_times()[:2])
        peak = rss_ready
        t0 = time.monotonic()

        async def scrape_and_watch():
            nonlocal peak
            job = asyncio.create_task(scrape_for(pages, seconds, concurrency))
            while not job.done():
                peak = max(peak, rss(procs))
                await asyncio.sleep(1)
            return await job

        done, failed = asyncio.run(scrape_and_watch())
        wall = time.monotonic() - t0
        peak = max(peak, rss(procs))
        cores = (cpu_seconds(procs) - cpu_before) / wall
        own = (sum(psutil.Process().cpu_times()[:2]) - own_before) / wall
        return Run(count, len(procs) - (len(procs) > 1), start_s, rss_ready, peak, cores,
                   done, failed, len(pages) / SCRAPE_INTERVAL, wall, own)  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(60)


def report(runs: list[Run], seconds: float, concurrency: int) -> str:
    mib = 2**20
    lines = [
        f"{len(runs) // len({r.nodes for r in runs})} runs per size, each a fresh fleet "
        f"(`--profiles {DEFAULT_MIX}`, seed = run number) scraped for {seconds:.0f} s: "
        "every /metrics page of every node, one TCP connection per scrape, paced at the rate "
        f"a {SCRAPE_INTERVAL:.0f} s scrape interval needs, at most {concurrency} in flight. "
        "Medians over the runs. Load average at the end: "
        f"{psutil.getloadavg()[0]:.2f} on {psutil.cpu_count()} CPUs.",
        "",
        "| nodes | processes | ready after | RSS ready | RSS peak | fleet CPU (cores) "
        "| fleet CPU per scrape | scrapes/s wanted | scrapes/s served | failed "
        "| scraper CPU (cores) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sorted({r.nodes for r in runs}):
        rows = [r for r in runs if r.nodes == size]
        lines.append(
            f"| {size:,} | {rows[0].processes} | {median([r.start_s for r in rows]):.1f} s "
            f"| {median([r.rss_ready for r in rows]) / mib:.0f} MiB "
            f"| {median([r.rss_peak for r in rows]) / mib:.0f} MiB "
            f"| {median([r.cpu_cores for r in rows]):.2f} "
            f"| {median([r.cpu_ms_per_scrape for r in rows]):.2f} ms "
            f"| {median([r.wanted_per_s for r in rows]):.0f} "
            f"| {median([r.per_s for r in rows]):.0f} "
            f"| {median([float(r.failed) for r in rows]):.0f} "
            f"| {median([r.scraper_cores for r in rows]):.2f} |"
        )
    behind = [
        f"{size:,}"
        for size in sorted({r.nodes for r in runs})
        # More than 1 % short: a scrape or two at the window's edge is not falling behind.
        if median([r.per_s for r in runs if r.nodes == size])
        < 0.99 * median([r.wanted_per_s for r in runs if r.nodes == size])
    ]
    if behind:
        lines += [
            "",
            f"- At {', '.join(behind)} nodes the scraper (one Python process on the same CPUs, "
            f"at most {concurrency} scrapes in flight) served fewer scrapes than the "
            f"{SCRAPE_INTERVAL:.0f} s pace wants: the fleet CPU column is for the rate served; "
            "the CPU per scrape carries over to other rates.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    runs = []
    for size in (int(s) for s in args.sizes.split(",")):
        for seed in range(1, args.runs + 1):
            run = one_run(size, seed, args.seconds, args.concurrency)
            print(run, flush=True)
            runs.append(run)
    body = report(runs, args.seconds, args.concurrency)
    print(body)
    if not args.no_write:
        update_section("simfleet", "Simulated fleet: memory and CPU while scraped", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
