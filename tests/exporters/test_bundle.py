"""The Python services in one process: every port answers, one failing leaves the others up."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

from contract.services import BY_NAME, SERVICES, SYS_EXPORTER
from testkit.ports import free_port
from tests.exporters.conftest import ROOT, ExporterProcess, fixture_roots_args, hung_sysfs_args

PYTHON_SERVICES = [s.name for s in SERVICES if s.name != SYS_EXPORTER.name]
# The Python services with everything they load, after every endpoint was fetched: what
# is left of the agent's 150 MB once node_exporter (~21 MB) and supervision are counted.
BUNDLE_RSS_BUDGET = 90 * 2**20


@pytest.fixture
def start_bundle():
    started: list[ExporterProcess] = []

    def start(services=PYTHON_SERVICES, *args: str, env=None, ports=None, ready=None):
        bundle = ExporterProcess(list(services), *args, env=env, ports=ports)
        started.append(bundle)
        bundle.wait_ready("/", services=ready)
        return bundle

    yield start
    for bundle in started:
        bundle.stop()


def _listening_pids(port: int) -> set[int]:
    return {
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
    }


def test_it_serves_every_python_service_from_one_process_within_budget(start_bundle):
    bundle = start_bundle(PYTHON_SERVICES, *fixture_roots_args("sysfs-ib"))
    for name in PYTHON_SERVICES:
        status, _, _ = bundle.get(BY_NAME[name].liveness_path, name)
        assert status == 200, name
        status, metrics, _ = bundle.get("/metrics", name)
        assert status == 200
        assert f'mac_exporter_build_info{{service="{name}"' in metrics
        assert _listening_pids(bundle.ports[name]) == {bundle.proc.pid}
        if name != "mango-sdk-agent":
            assert json.loads(bundle.get("/health", name)[1])["service"] == name
    assert json.loads(bundle.get("/diagnostics", "sys-manager")[1])["checks"]
    assert {d["device"] for d in json.loads(bundle.get("/v1/rdma", "mango-sdk-agent")[1])}
    rss = psutil.Process(bundle.proc.pid).memory_info().rss
    assert rss <= BUNDLE_RSS_BUDGET, f"{rss / 2**20:.0f} MB resident for the Python services"
    bundle.proc.send_signal(signal.SIGTERM)
    assert bundle.proc.wait(timeout=15) == 0
    assert "Traceback" not in bundle.output()
    assert not any(_listening_pids(port) for port in bundle.ports.values())


class _SilentBmc(BaseHTTPRequestHandler):
    """A BMC's Redfish service that accepts connections and never answers."""

    def do_GET(self):
        self.server.release.wait(30)

    def log_message(self, *_args):
        pass


@pytest.fixture
def silent_bmc():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SilentBmc)
    server.daemon_threads = True
    server.release = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.release.set()
    server.shutdown()
    server.server_close()


def test_hung_backends_of_two_services_leave_the_others_answering(
    start_bundle, tmp_path, silent_bmc
):
    # nic-exporter: a hung sysfs read; bmc-agent: a BMC that takes connections and never
    # answers.
    args = hung_sysfs_args(tmp_path)
    services = ["nic-exporter", "bmc-agent", "sw-exporter", "rocm-exporter", "mango-sdk-agent"]
    bundle = start_bundle(
        services, *args, "--collector-timeout", "2",
        env={"MAC_BMC_REDFISH_URL": silent_bmc, "MAC_BMC_REDFISH_USER": "u",
             "MAC_BMC_REDFISH_PASSWORD": "p"},
    )  # fmt: skip
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        # Keep both broken services busy with more scrapes than they have threads.
        hung = [pool.submit(bundle.get, "/metrics", "nic-exporter", 20) for _ in range(6)]
        hung += [pool.submit(bundle.get, "/metrics", "bmc-agent", 20) for _ in range(6)]
        time.sleep(0.3)
        for name, path in (
            ("sw-exporter", "/metrics"),
            ("rocm-exporter", "/metrics"),
            ("mango-sdk-agent", "/docs"),
            ("sw-exporter", "/health"),
        ):
            started = time.monotonic()
            status, _, _ = bundle.get(path, name, timeout=5)
            assert status == 200 and time.monotonic() - started < 1.5, (name, path)
        for future in hung:
            assert future.result()[0] == 200  # late, without the hung collector's samples
    _, nic, _ = bundle.get("/metrics", "nic-exporter", timeout=10)
    assert 'mac_exporter_collector_success{collector="rdma"} 0.0' in nic
    _, bmc, _ = bundle.get("/metrics", "bmc-agent", timeout=10)
    assert 'mac_exporter_build_info{service="bmc-agent"' in bmc
    assert bundle.proc.poll() is None


def test_a_service_whose_build_fails_keeps_its_port_with_the_reason(start_bundle, tmp_path):
    # A broken installation of mango-sdk-agent's web framework: its module cannot import.
    broken = tmp_path / "broken" / "fastapi"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('fastapi is broken on this node')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(broken.parent), str(ROOT)])}
    services = ["mango-sdk-agent", "sw-exporter", "nic-exporter"]
    bundle = start_bundle(services, *fixture_roots_args("sysfs-ib"), env=env)
    status, metrics, _ = bundle.get("/metrics", "mango-sdk-agent")
    assert status == 200
    line = next(
        line
        for line in metrics.splitlines()
        if line.startswith('mac_exporter_backend_available{backend="mango-sdk-agent"')
    )
    assert "fastapi is broken on this node" in line and line.endswith(" 0.0")
    status, body, _ = bundle.get("/health", "mango-sdk-agent")
    assert status == 503
    assert json.loads(body)["status"] == "failed"
    assert "ImportError" in json.loads(body)["error"]
    assert bundle.get("/docs", "mango-sdk-agent")[0] == 404  # its liveness URL says failing
    assert bundle.get("/metrics", "sw-exporter")[0] == 200
    assert bundle.get("/metrics", "nic-exporter")[0] == 200


def test_a_taken_port_leaves_out_only_its_service(start_bundle):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    try:
        ports = {"sw-exporter": free_port(), "bmc-agent": taken, "nic-exporter": free_port()}
        bundle = start_bundle(
            list(ports), *fixture_roots_args(), ports=ports, ready=["sw-exporter", "nic-exporter"]
        )
        assert bundle.get("/metrics", "sw-exporter")[0] == 200
        assert bundle.get("/metrics", "nic-exporter")[0] == 200
        assert bundle.stop() == 0
    finally:
        holder.close()
    output = bundle.output()
    assert f"Error: bmc-agent: cannot listen on 127.0.0.1:{taken}" in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sys-exporter", "sw-exporter"], "sys-exporter is node_exporter itself and runs alone"),
        (["sw-exporter", "bmc-agent", "--port", "1"], "--port is for a single service"),
        (["sw-exporter=1", "sw-exporter=2"], "sw-exporter named twice"),
        (["sw-exporter=x", "bmc-agent"], "'sw-exporter=x': the port after = is not a number"),
        (["sw-exporter=70000", "bmc-agent"], "'sw-exporter=70000': port 70000 is not a TCP port"),
        (["sw-exporter", "gpu-exporter"], "unknown service 'gpu-exporter'"),
    ],
)
def test_a_wrong_set_of_services_is_a_clear_error(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "exporters", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
