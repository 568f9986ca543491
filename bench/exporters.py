"""Benchmark: MAC's sys-exporter beside Debian's prometheus-node-exporter, same host, same run.

Each exporter runs as a real process on a free loopback port and is scraped over
a kept-alive HTTP connection, the way Prometheus scrapes. Scrapes alternate
between the exporters so a burst of load from other processes hits all of them
alike. Measured: scrape latency (median, p99), CPU time per scrape (psutil
cpu_times of the exporter process), resident memory after the run, and the number
of series each answer carries. node_exporter runs twice: with its defaults, and
limited to the collectors sys-exporter implements (the like-for-like baseline).

Run: ``.venv/bin/python -m bench.exporters [--scrapes N]`` (default 400, < 3 min).
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.report import median, percentile, update_section
from testkit.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
SAME_COLLECTORS = (
    "cpu", "stat", "meminfo", "loadavg", "diskstats", "filesystem", "netdev", "netclass",
    "time", "uname",
)  # fmt: skip
RSS_TARGET_MB = 60


@dataclass
class Target:
    name: str
    command: list[str]
    port: int
    process: subprocess.Popen | None = None
    latencies: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    rss_bytes: int = 0
    series: int = 0
    connection: http.client.HTTPConnection | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                self.scrape()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"{self.name} did not start: {' '.join(self.command)}")

    def scrape(self) -> bytes:
        assert self.connection is not None
        self.connection.request("GET", "/metrics")
        response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise OSError(f"{self.name}: HTTP {response.status}")
        return body

    def cpu(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return times.user + times.system

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def count_series(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def run(scrapes: int) -> list[Target]:
    targets = [
        Target(
            "MAC sys-exporter",
            [sys.executable, "-m", "exporters", "sys-exporter", "--bind", "127.0.0.1",
             "--port", "{port}", "--log-level", "WARNING"],
            free_port(),
        ),
        Target(
            "node_exporter 1.5 (same collectors)",
            [NODE_EXPORTER, "--web.listen-address=127.0.0.1:{port}",
             "--collector.disable-defaults", *[f"--collector.{c}" for c in SAME_COLLECTORS]],
            free_port(),
        ),
        Target(
            "node_exporter 1.5 (defaults)",
            [NODE_EXPORTER, "--web.listen-address=127.0.0.1:{port}"],
            free_port(),
        ),
    ]  # fmt: skip
    for target in targets:
        target.command = [part.replace("{port}", str(target.port)) for part in target.command]
        target.start()
    try:
        for _ in range(20):  # warm-up: imports, caches, first statvfs
            for target in targets:
                target.scrape()
        start_cpu = {target.name: target.cpu() for target in targets}
        for _ in range(scrapes):
            for target in targets:
                started = time.perf_counter()
                body = target.scrape()
                target.latencies.append(time.perf_counter() - started)
        for target in targets:
            target.cpu_seconds = (target.cpu() - start_cpu[target.name]) / scrapes
            target.rss_bytes = psutil.Process(target.process.pid).memory_info().rss
            target.series = count_series(body if target is targets[-1] else target.scrape())
    finally:
        for target in targets:
            target.stop()
    return targets


def report(targets: list[Target], scrapes: int, elapsed: float) -> str:
    rows = [
        "| exporter | series | median scrape | p99 scrape | CPU per scrape | RSS |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for t in targets:
        rows.append(
            f"| {t.name} | {t.series} | {median(t.latencies) * 1000:.2f} ms | "
            f"{percentile(t.latencies, 99) * 1000:.2f} ms | {t.cpu_seconds * 1000:.2f} ms | "
            f"{t.rss_bytes / 2**20:.1f} MB |"
        )
    mac, same, defaults = targets
    verdict_speed = median(mac.latencies) <= median(defaults.latencies)
    verdict_rss = mac.rss_bytes / 2**20 < RSS_TARGET_MB
    load = os.getloadavg()[0]
    return "\n".join(
        [
            f"{scrapes} scrapes per exporter over one kept-alive connection each, alternating "
            f"between exporters; {elapsed:.0f} s in all. Load average during the run: "
            f"{load:.2f} on {psutil.cpu_count()} CPUs (the scraping client shares them with "
            "both exporters, so absolute numbers are noisy; the comparison is same-run).",
            "",
            *rows,
            "",
            f"- Target median scrape no slower than node_exporter (defaults): "
            f"**{'met' if verdict_speed else 'NOT met'}** "
            f"({median(mac.latencies) * 1000:.2f} ms vs {median(defaults.latencies) * 1000:.2f} ms;"
            f" like-for-like collectors: {median(same.latencies) * 1000:.2f} ms).",
            f"- Target resident memory under {RSS_TARGET_MB} MB: "
            f"**{'met' if verdict_rss else 'NOT met'}** ({mac.rss_bytes / 2**20:.1f} MB).",
            "- Series differ: node_exporter's defaults add collectors sys-exporter does not "
            "have (hwmon, sockstat, vmstat, ...), which is why the like-for-like row exists.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=400)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if not os.path.exists(NODE_EXPORTER):
        print(
            "Error: prometheus-node-exporter not installed (apt install prometheus-node-exporter)"
        )
        return 1
    started = time.monotonic()
    targets = run(args.scrapes)
    body = report(targets, args.scrapes, time.monotonic() - started)
    print(body)
    if not args.no_write:
        update_section("exporters", "sys-exporter vs node_exporter", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
