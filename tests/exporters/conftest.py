"""Helpers for the exporter tests: fixture paths, real exporter processes, golden files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest

from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.waiting import WaitTimeout, http_status, wait_for

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
GOLDEN = FIXTURES / "golden"
# Samples whose value depends on the clock or the installed version: dropped before comparing.
VOLATILE = re.compile(
    r"^(node_time_seconds|mac_exporter_collector_duration_seconds|"
    r"mac_exporter_collector_last_success_timestamp_seconds|mac_exporter_build_info)\b"
)


def fixture_roots_args(sys_dir: str = "sysfs-net") -> list[str]:
    return [
        "--sys-root", str(FIXTURES / sys_dir),
        "--proc-root", str(FIXTURES / "proc"),
        "--dev-root", str(FIXTURES / "dev-amd"),
        "--rootfs", str(FIXTURES / "rootfs"),
    ]  # fmt: skip


def scrape_text(registry) -> str:
    return generate_latest(registry).decode()


def backend_available(registry, backend: str, reason: str = "") -> float | None:
    """The sample of mac_exporter_backend_available{backend, reason}; None when absent."""
    labels = {"backend": backend, "reason": reason}
    return registry.get_sample_value("mac_exporter_backend_available", labels)


# Evidence is valued by the moment it was seen: the golden files keep the line, not the time.
SEEN_AT = re.compile(r"^(mac_gpu_health_evidence\{.*\}) \S+$")


def normalise(text: str) -> str:
    lines = (SEEN_AT.sub(r"\1 <time>", line) for line in text.splitlines())
    return "".join(line + "\n" for line in lines if not VOLATILE.match(line))


def assert_golden(name: str, text: str) -> None:
    """Compare with tests/fixtures/golden/<name>.prom; MAC_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / f"{name}.prom"
    got = normalise(text)
    if os.environ.get("MAC_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"{path} missing: run with MAC_UPDATE_GOLDEN=1 to create it"
    assert got == path.read_text(), f"/metrics differs from {path} (MAC_UPDATE_GOLDEN=1 to accept)"


def fixture_ethtool(iface: str) -> str:
    """The hardware boundary of nic-exporter: recorded `ethtool -S` output per interface."""
    path = FIXTURES / "ethtool" / f"{iface}.txt"
    if not path.exists():
        raise RuntimeError(f"ethtool -S {iface}: Operation not supported")
    return path.read_text()


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str, Message]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers


def hung_sysfs_args(tmp_path: Path) -> list[str]:
    """fixture_roots_args() with a sysfs whose port state is a FIFO without a writer:
    open() blocks in the kernel, a real hung sysfs read."""
    sys_root = tmp_path / "sys"
    port = sys_root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    os.mkfifo(port / "state")
    args = fixture_roots_args()
    args[args.index("--sys-root") + 1] = str(sys_root)
    return args


class ExporterProcess:
    """`python -m exporters` as a real child process on loopback.

    One service (`ExporterProcess("nic-exporter", ...)`, `--port` as a container runs
    it) or several in one process (`ExporterProcess(["sw-exporter", ...], ...)`,
    `name=PORT` each as the agent's bundle runs them); `ports` picks their ports.
    """

    def __init__(self, services: str | list[str], *args: str, env: dict | None = None, ports=None):
        if isinstance(services, str):
            self.ports = {services: free_port()}
            command = [services, "--port", str(self.ports[services])]
        else:
            self.ports = ports or {name: free_port() for name in services}
            command = [f"{name}={port}" for name, port in self.ports.items()]
        self.port = next(iter(self.ports.values()))
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporters", *command, "--bind", "127.0.0.1", *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def url_of(self, service: str | None, path: str) -> str:
        port = self.ports[service] if service else self.port
        return f"http://127.0.0.1:{port}{path}"

    def wait_ready(
        self, path: str = "/health", services: list[str] | None = None, timeout: float = 30.0
    ) -> None:
        """Until each of `services` (all by default) answers `path` below 500."""
        for service in services or list(self.ports):
            url = self.url_of(service, path)
            try:
                wait_for(
                    lambda url=url: (http_status(url) or 500) < 500,
                    timeout,
                    0.1,
                    what=f"{service} answering {path}",
                    process=self.proc,
                )
            except WaitTimeout as exc:
                raise WaitTimeout(f"{exc}\n{self.output()}") from None

    def get(
        self, path: str, service: str | None = None, timeout: float = 5.0
    ) -> tuple[int, str, Message]:
        """GET `path` of `service` (the first one by default)."""
        return http_get(self.url_of(service, path), timeout=timeout)

    def json(self, path: str):
        status, body, _ = self.get(path)
        assert status == 200, body
        return json.loads(body)

    def stop(self) -> int:
        return stop_process(self.proc)

    def output(self) -> str:
        if self.proc.poll() is None:
            return ""
        return self.proc.stdout.read() if self.proc.stdout else ""


@pytest.fixture
def start_exporter():
    started: list[ExporterProcess] = []

    def start(service: str, *args: str, env: dict | None = None, ready: str = "/health"):
        process = ExporterProcess(service, *args, env=env)
        started.append(process)
        process.wait_ready(ready)
        return process

    yield start
    for process in started:
        process.stop()
