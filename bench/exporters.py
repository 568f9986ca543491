"""Benchmark: the agent's exporters as `mac` runs them, scrape time and memory, same run.

sys-exporter is node_exporter itself (started through ``python -m exporters
sys-exporter``, which becomes node_exporter with MAC's flags), so its row is
node_exporter's own figures; node_exporter with Debian's defaults runs beside it to
show what MAC's extra collectors cost. The Python exporters run on this machine, or,
where it lacks the hardware, on the recorded hardware of the tests (two H200s through
a fake NVML, an MI300X through a fake amdsmi over the amdgpu sysfs tree, the RDMA
sysfs tree of mlx5/bnxt_re/irdma NICs), so each does its real parsing work.

Each exporter is a real process on a free loopback port, scraped over one kept-alive
HTTP connection the way Prometheus scrapes, in turns so a burst of load from other
processes hits all of them alike. Several runs (fresh processes each); the table
shows the median over runs of each run's median and p99 scrape, CPU time per scrape
(psutil cpu_times of the process) and resident memory after the run.

Run: ``.venv/bin/python -m bench.exporters [--runs 3] [--scrapes 300]`` (< 3 min).
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.report import median, percentile, update_section
from testkit.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
PY = [sys.executable, "-m"]
QUIET = ["--log-level", "WARNING"]

# (row name, command with {port}, what it reads)
EXPORTERS: tuple[tuple[str, list[str], str], ...] = (
    ("sys-exporter (node_exporter 1.5, MAC's flags)",
     [*PY, "exporters", "sys-exporter", "--bind", "127.0.0.1", "--port", "{port}"],
     "this machine"),
    ("node_exporter 1.5, Debian defaults",
     [NODE_EXPORTER, "--web.listen-address=127.0.0.1:{port}"], "this machine"),
    ("dcgm-exporter (Python)",
     [*PY, "testkit.fakes.nvml", "--port", "{port}"], "2 recorded H200s"),
    ("rocm-exporter (Python)",
     [*PY, "testkit.fakes.amdsmi", "--port", "{port}"], "1 recorded MI300X"),
    ("nic-exporter (Python)",
     [*PY, "exporters", "nic-exporter", "--bind", "127.0.0.1", "--port", "{port}",
      "--sys-root", str(FIXTURES / "sysfs-ib"), *QUIET], "recorded sysfs, 5 NICs"),
    ("sw-exporter (Python)",
     [*PY, "exporters", "sw-exporter", "--bind", "127.0.0.1", "--port", "{port}", *QUIET],
     "this machine"),
    ("bmc-agent (Python)",
     [*PY, "exporters", "bmc-agent", "--bind", "127.0.0.1", "--port", "{port}", *QUIET],
     "this machine (no BMC)"),
)  # fmt: skip


@dataclass
class Target:
    name: str
    command: list[str]
    reads: str
    port: int = 0
    process: subprocess.Popen | None = None
    latencies: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    rss_bytes: int = 0
    series: int = 0
    connection: http.client.HTTPConnection | None = None

    def start(self, env: dict[str, str]) -> None:
        self.port = free_port()
        argv = [part.replace("{port}", str(self.port)) for part in self.command]
        self.process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                self.scrape()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"{self.name} did not start: {' '.join(argv)}")

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


@dataclass
class Row:
    name: str
    reads: str
    medians: list[float] = field(default_factory=list)
    p99s: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    series: int = 0


def tcp_sockets() -> int:
    """TCP sockets in use on the host (/proc/net/sockstat): what tcpstat walks per scrape."""
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            words = line.split()
            return int(words[words.index("inuse") + 1]) + int(words[words.index("tw") + 1])
    return 0


def count_series(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def one_run(scrapes: int, env: dict[str, str]) -> list[Target]:
    targets = [Target(name, command, reads) for name, command, reads in EXPORTERS]
    try:
        for target in targets:
            target.start(env)
        for _ in range(20):  # warm-up: imports, caches, the GPM sample pair
            for target in targets:
                target.scrape()
        start_cpu = {target.name: target.cpu() for target in targets}
        for _ in range(scrapes):
            for target in targets:
                started = time.perf_counter()
                target.scrape()
                target.latencies.append(time.perf_counter() - started)
        for target in targets:
            target.cpu_seconds = (target.cpu() - start_cpu[target.name]) / scrapes
            target.rss_bytes = psutil.Process(target.process.pid).memory_info().rss
            target.series = count_series(target.scrape())
    finally:
        for target in targets:
            target.stop()
    return targets


def run(runs: int, scrapes: int) -> list[Row]:
    rows = [Row(name, reads) for name, _, reads in EXPORTERS]
    with tempfile.TemporaryDirectory() as textfile_dir:
        env = {**os.environ, "MAC_TEXTFILE_DIR": textfile_dir, "NODE_NAME": "bench-node"}
        for _ in range(runs):
            for row, target in zip(rows, one_run(scrapes, env), strict=True):
                row.medians.append(median(target.latencies))
                row.p99s.append(percentile(target.latencies, 99))
                row.cpus.append(target.cpu_seconds)
                row.rss.append(target.rss_bytes)
                row.series = target.series
    return rows


def report(rows: list[Row], runs: int, scrapes: int, elapsed: float) -> str:
    table = [
        "| exporter | reads | series | median scrape | p99 scrape | CPU per scrape | RSS |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        table.append(
            f"| {r.name} | {r.reads} | {r.series} | {median(r.medians) * 1000:.2f} ms | "
            f"{median(r.p99s) * 1000:.2f} ms | {median(r.cpus) * 1000:.2f} ms | "
            f"{median(r.rss) / 2**20:.1f} MB |"
        )
    host, defaults = rows[0], rows[1]
    python_rss = [median(r.rss) / 2**20 for r in rows[2:]]
    load = os.getloadavg()[0]
    return "\n".join(
        [
            f"{runs} runs of {scrapes} scrapes per exporter (fresh processes each run), one "
            f"kept-alive connection each, in turns; {elapsed:.0f} s in all. Each figure is the "
            f"median over the runs. Load average at the end: {load:.2f} on "
            f"{psutil.cpu_count()} CPUs (the scraping client shares them with the exporters; "
            "compare rows of the same run, not absolute numbers).",
            "",
            *table,
            "",
            f"- sys-exporter is node_exporter: its row is node_exporter's own figures with MAC's "
            f"flags (processes, interrupts, tcpstat on; infiniband off: nic-exporter serves it). "
            f"Against Debian's defaults on the same host and run: "
            f"{median(host.medians) * 1000:.2f} ms vs {median(defaults.medians) * 1000:.2f} ms "
            f"per scrape, {host.series} vs {defaults.series} series; TCP sockets on this host "
            f"at the end of the run (what tcpstat walks on each scrape): {tcp_sockets()}.",
            f"- The Python exporters, one process each here, use "
            f"{min(python_rss):.0f}-{max(python_rss):.0f} MB each; node_exporter "
            f"{median(host.rss) / 2**20:.0f} MB.",
            "- No row is a faster-than claim across different work: each exporter serves "
            "different families, and the recorded-hardware rows parse recorded answers, not "
            "live devices.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if not os.path.exists(NODE_EXPORTER):
        print(
            "Error: prometheus-node-exporter not installed "
            "(sudo apt-get install -y prometheus-node-exporter)"
        )
        return 1
    started = time.monotonic()
    rows = run(args.runs, args.scrapes)
    body = report(rows, args.runs, args.scrapes, time.monotonic() - started)
    print(body)
    if not args.no_write:
        update_section(
            "exporters", "Agent exporters: node_exporter and MAC's Python exporters", body
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
