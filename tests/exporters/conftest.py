"""Helpers for the exporter tests: fixture paths, real exporter processes, golden files."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest

from testkit.ports import free_port

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


def normalise(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if not VOLATILE.match(line))


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


class ExporterProcess:
    """`python -m exporters <service>` as a real child process on a free loopback port."""

    def __init__(self, service: str, *args: str, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporters", service, "--bind", "127.0.0.1",
             "--port", str(self.port), *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip

    def wait_ready(self, path: str = "/health", timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exporter exited {self.proc.returncode}: {self.output()}")
            with contextlib.suppress(OSError):
                status, _, _ = http_get(self.url + path, timeout=2)
                if status < 500:
                    return
            time.sleep(0.1)
        raise AssertionError(f"exporter not ready after {timeout}s")

    def get(self, path: str) -> tuple[int, str, Message]:
        return http_get(self.url + path)

    def json(self, path: str):
        status, body, _ = self.get(path)
        assert status == 200, body
        return json.loads(body)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

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
