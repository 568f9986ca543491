"""Real servers the dashboard tests, screenshots and benchmark stand up on loopback.

- Debian's Prometheus on a free port, scraping given targets every second with the
  labels the targets file gives (node=<hostname>);
- the real sys-exporter (`python -m exporters sys-exporter`) for CPU and memory;
- a small metrics server standing in for the GPU and RDMA hardware only: readings
  that NVML, amdgpu or the NIC counters would give, under the exporters' names;
- uvicorn serving macweb.asgi against a given database.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, start_wsgi_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.waiting import wait_http

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = "/usr/bin/prometheus"
NVIDIA_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]
EXPORTER = [sys.executable, "-m", "exporters"]
QUIET = ["--log-level", "WARNING"]
UVICORN = [sys.executable, "-m", "uvicorn", "macweb.asgi:application", "--host", "127.0.0.1"]
AMD_LABELS = ["gpu_id", "serial_number", "card_model", "card_vendor", "hostname"]


class HardwareReadings:
    """What the GPUs and RDMA NICs of one node read now: smooth, plausible, moving values."""

    def __init__(self, hostname: str, vendor: str, gpus: int = 4, nics: int = 2) -> None:
        self.hostname, self.vendor, self.gpus, self.nics = hostname, vendor, gpus, nics
        self.started = time.time()

    def _wave(self, index: int, period: float, low: float, high: float) -> float:
        phase = (time.time() / period) + index * 0.7
        return low + (high - low) * (0.5 + 0.5 * math.sin(phase))

    def collect(self) -> Iterable[Metric]:
        yield from self._gpu_families()
        rx = CounterMetricFamily("rdma_rx_bytes", "RDMA bytes received.", labels=["device", "port"])
        tx = CounterMetricFamily("rdma_tx_bytes", "RDMA bytes sent.", labels=["device", "port"])
        elapsed = time.time() - self.started
        for n in range(self.nics):
            rx.add_metric([f"mlx5_{n}", "1"], elapsed * (9e9 + n * 2e9) + 1e6 * math.sin(elapsed))
            tx.add_metric([f"mlx5_{n}", "1"], elapsed * (7e9 + n * 1e9) + 1e6 * math.cos(elapsed))
        yield rx
        yield tx

    def _gpu_families(self) -> Iterable[Metric]:
        if self.vendor == "nvidia":
            names = {
                "util": "DCGM_FI_DEV_GPU_UTIL",
                "mem": "DCGM_FI_DEV_FB_USED",
                "temp": "DCGM_FI_DEV_GPU_TEMP",
                "power": "DCGM_FI_DEV_POWER_USAGE",
            }
            labels = NVIDIA_LABELS
        elif self.vendor == "amd":
            names = {
                "util": "gpu_gfx_activity",
                "mem": "gpu_used_vram",
                "temp": "gpu_junction_temperature",
                "power": "gpu_power_usage",
            }
            labels = AMD_LABELS
        else:
            return
        ranges = {"util": (20, 98), "mem": (30000, 76000), "temp": (45, 78), "power": (180, 650)}
        periods = {"util": 40, "mem": 300, "temp": 120, "power": 50}
        for key, name in names.items():
            family = GaugeMetricFamily(name, f"{key} of each GPU", labels=labels)
            for gpu in range(self.gpus):
                ident = [str(gpu), f"GPU-{gpu:04d}", f"nvidia{gpu}", "H100", self.hostname]
                value = self._wave(gpu, periods[key], *ranges[key])
                family.add_metric(ident, value)
            yield family


def start_hardware_metrics(readings: HardwareReadings) -> tuple[object, str]:
    """Serve the readings on a free loopback port; returns (server, "host:port")."""
    registry = CollectorRegistry()
    registry.register(readings)
    port = free_port()
    server, _ = start_wsgi_server(port, addr="127.0.0.1", registry=registry)
    return server, f"127.0.0.1:{port}"


def start_sys_exporter(
    host: str = "127.0.0.1", port: int | None = None
) -> tuple[subprocess.Popen, str]:
    """The real sys-exporter of this machine on a loopback address (free port by default)."""
    port = port or free_port(host)
    proc = subprocess.Popen(
        [*EXPORTER, "sys-exporter", "--port", str(port), "--bind", host, *QUIET],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_http(f"http://{host}:{port}/metrics", process=proc)
    return proc, f"{host}:{port}"


@dataclass
class Target:
    job: str
    address: str
    labels: dict[str, str]


@dataclass
class PrometheusServer:
    proc: subprocess.Popen
    url: str
    data_dir: Path

    def query(self, expr: str) -> list[dict]:
        query = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=5) as resp:
            return json.load(resp)["data"]["result"]

    def wait_for(self, expr: str, timeout: float = 30) -> None:
        """Until `expr` has a result (e.g. a rate over two scrapes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.query(expr):
                    return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        raise TimeoutError(f"Prometheus at {self.url} has no result for {expr} after {timeout}s")

    def stop(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_prometheus(targets: list[Target], work: Path, interval: str = "1s") -> PrometheusServer:
    """Debian's prometheus on a free loopback port, scraping `targets`."""
    jobs: dict[str, list[dict]] = {}
    for target in targets:
        jobs.setdefault(target.job, []).append(
            {"targets": [target.address], "labels": target.labels}
        )
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": job, "static_configs": groups} for job, groups in jobs.items()
        ],
    }
    return start_prometheus_config(config, work)


def start_prometheus_config(config: dict, work: Path, port: int | None = None) -> PrometheusServer:
    """Debian's prometheus on `port` (a free loopback one by default) with the configuration."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = port or free_port()
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(work / "prometheus.log", "wb"),  # noqa: SIM115 - the child owns it
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/-/ready", process=proc)
    return PrometheusServer(proc, url, work)


def start_uvicorn(env: dict[str, str], port: int | None = None) -> tuple[subprocess.Popen, str]:
    """macweb.asgi under uvicorn on a free loopback port, with `env` on top of ours."""
    port = port or free_port()
    proc = subprocess.Popen(
        [*UVICORN, "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=None,
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/accounts/login/", process=proc)
    return proc, url
