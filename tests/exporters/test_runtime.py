"""The shared runtime: isolated, timed collectors, backend gauges and the command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from prometheus_client.core import GaugeMetricFamily

from exporters.runtime import BackendStatus, CollectorRunner, Exporter
from testkit.ports import free_port
from tests.exporters.conftest import ROOT, ExporterProcess, fixture_roots_args, hung_sysfs_args


class Fixed:
    def __init__(self, name: str, value: float = 1.0):
        self.name = name
        self.value = value

    def collect(self):
        yield GaugeMetricFamily(f"test_{self.name}", "a value", value=self.value)


class Broken:
    name = "broken"

    def collect(self):
        raise OSError("device vanished")


class Hung:
    name = "hung"

    def __init__(self):
        self.release = threading.Event()
        self.calls = 0

    def collect(self):
        self.calls += 1
        self.release.wait(30)
        yield GaugeMetricFamily("test_hung", "late", value=1)


class WithBackend:
    name = "gpu"

    def collect(self):
        return []

    def backends(self):
        return [BackendStatus("nvml", False, "libnvidia-ml.so.1 not found")]


def test_a_failing_collector_does_not_blank_the_others():
    exporter = Exporter("test", [Fixed("a", 3), Broken()])
    registry = exporter.registry
    assert registry.get_sample_value("test_a") == 3
    assert registry.get_sample_value("mac_exporter_collector_success", {"collector": "a"}) == 1
    assert registry.get_sample_value("mac_exporter_collector_success", {"collector": "broken"}) == 0
    health = exporter.health()
    assert health["status"] == "degraded"
    assert "device vanished" in health["collectors"]["broken"]["error"]


def test_a_hung_collector_costs_one_deadline_and_is_not_started_twice():
    hung = Hung()
    exporter = Exporter("test", [Fixed("a"), hung], timeout=0.3)
    try:
        for _ in range(3):
            started = time.monotonic()
            registry = exporter.registry
            assert registry.get_sample_value("test_a") == 1
            assert time.monotonic() - started < 1.5
            assert (
                registry.get_sample_value("mac_exporter_collector_success", {"collector": "hung"})
                == 0
            )
        assert hung.calls == 1  # later scrapes waited on the same run
        hung.release.set()
        time.sleep(0.1)
        assert exporter.registry.get_sample_value("test_hung") == 1
    finally:
        hung.release.set()
        exporter.close()


def test_a_missing_backend_is_a_gauge_with_its_reason():
    registry = Exporter("test", [WithBackend()]).registry
    value = registry.get_sample_value(
        "mac_exporter_backend_available",
        {"backend": "nvml", "reason": "libnvidia-ml.so.1 not found"},
    )
    assert value == 0


def test_duplicate_collector_names_are_refused():
    try:
        CollectorRunner([Fixed("a"), Fixed("a")])
    except ValueError as exc:
        assert "unique" in str(exc)
    else:
        raise AssertionError("duplicate names accepted")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporters", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_help_lists_every_service_with_its_port():
    result = run_cli("--help")
    assert result.returncode == 0
    for name, port in (
        ("sys-exporter", "29101"),
        ("nic-exporter", "29500"),
        ("mango-sdk-agent", "28000"),
    ):
        assert name in result.stdout and port in result.stdout


def test_unknown_service_is_a_clear_error():
    result = run_cli("gpu-exporter")
    assert result.returncode == 2
    assert "unknown service 'gpu-exporter'" in result.stderr
    assert "Traceback" not in result.stderr


def test_port_in_use_is_a_clear_error():
    import socket

    holder = socket.socket()
    holder.bind(("127.0.0.1", free_port()))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        result = run_cli("sys-exporter", "--bind", "127.0.0.1", "--port", str(port))
    finally:
        holder.close()
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "--port" in result.stderr and "Traceback" not in result.stderr


def test_port_in_use_names_the_process_holding_it():
    import socket

    from exporters.server import PortInUseError, bind_socket

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(PortInUseError) as caught:
            bind_socket("127.0.0.1", port)
    finally:
        holder.close()
    assert "Another process holds the port" in str(caught.value)
    assert f"ss -ltnp 'sport = :{port}'" in str(caught.value)


def test_an_address_not_on_this_host_is_named_not_blamed_on_another_process():
    # 192.0.2.1 (TEST-NET-1) is no address of this host: EADDRNOTAVAIL, as MAC_BIND is at
    # boot before its interface is up.
    port = free_port()
    result = run_cli("nic-exporter", "--bind", "192.0.2.1", "--port", str(port))
    assert result.returncode == 1
    assert f"cannot listen on 192.0.2.1:{port}" in result.stderr
    assert "192.0.2.1 is not an address of this host" in result.stderr
    assert "MAC_BIND" in result.stderr and "ip -br addr" in result.stderr
    assert "Another process holds" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_port_not_allowed_says_what_permission_it_needs(monkeypatch):
    import errno
    import socket

    from exporters.server import PortInUseError, bind_socket

    def refused(_sock, _address):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(socket.socket, "bind", refused)  # as for a user other than root
    with pytest.raises(PortInUseError) as caught:
        bind_socket("127.0.0.1", 80)
    message = str(caught.value)
    assert "cannot listen on 127.0.0.1:80: Permission denied" in message
    assert "below 1024" in message and "CAP_NET_BIND_SERVICE" in message
    assert "Another process holds" not in message


@pytest.mark.parametrize(
    ("service", "signum", "ready"),
    [
        ("nic-exporter", signal.SIGTERM, "/metrics"),
        ("nic-exporter", signal.SIGINT, "/metrics"),
        ("mango-sdk-agent", signal.SIGTERM, "/docs"),
    ],
)
def test_a_stop_signal_exits_cleanly(service, signum, ready):
    process = ExporterProcess(service, *fixture_roots_args())
    process.wait_ready(ready)
    process.proc.send_signal(signum)
    assert process.proc.wait(timeout=10) == 0
    assert "Traceback" not in process.output()


def test_sys_exporter_becomes_node_exporter_and_stops_on_sigterm():
    """The same pid is node_exporter (exec), so a supervisor's SIGTERM reaches it."""
    process = ExporterProcess("sys-exporter", *fixture_roots_args())
    process.wait_ready("/metrics")
    assert os.path.basename(os.readlink(f"/proc/{process.proc.pid}/exe")).startswith(
        ("prometheus-node-exporter", "node_exporter")
    )
    process.proc.send_signal(signal.SIGTERM)
    process.proc.wait(timeout=10)  # Go's default: the signal ends it at once


def test_a_missing_root_is_a_clear_error(tmp_path):
    result = run_cli("sys-exporter", "--proc-root", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert f"--proc-root {tmp_path / 'nope'} is not a directory" in result.stderr


def test_a_stuck_collector_neither_stalls_scrapes_nor_blocks_the_exit(tmp_path):
    args = hung_sysfs_args(tmp_path)
    process = ExporterProcess("nic-exporter", *args, "--collector-timeout", "1")
    process.wait_ready("/health")
    for _ in range(2):
        started = time.monotonic()
        status, metrics, _ = process.get("/metrics")
        assert status == 200 and time.monotonic() - started < 4
        assert 'mac_exporter_collector_success{collector="rdma"} 0.0' in metrics
        assert 'mac_exporter_build_info{service="nic-exporter"' in metrics
    assert process.json("/health")["collectors"]["rdma"]["error"].startswith("still running")
    process.proc.send_signal(signal.SIGTERM)
    assert process.proc.wait(timeout=10) == 0


# --- the node's name on every exporter's series: the name it registers under --------------


def test_node_hostname_is_the_registered_name(monkeypatch):
    import socket

    from exporters.runtime import node_hostname
    from node.config import NodeConfig

    monkeypatch.setattr(socket, "gethostname", lambda: "GPU-12")
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert node_hostname() == "gpu-12" == NodeConfig(environ={}).node_name()[0]
    monkeypatch.setenv("NODE_NAME", " Rack3-GPU-07 ")
    assert node_hostname() == "rack3-gpu-07" == NodeConfig(environ=os.environ).node_name()[0]
    # Compose's ${NODE_NAME:-} when mac passed none: the host name, never an empty label.
    monkeypatch.setenv("NODE_NAME", "")
    assert node_hostname() == "gpu-12"


def test_dcgm_hostname_label_matches_the_registered_name(monkeypatch):
    """docs/jobs.md joins DCGM series and mac_gpu_job_info on Hostname: the same name."""
    import socket

    from exporters.nvidia import NvmlSource
    from exporters.runtime import Options
    from node.host import Roots
    from testkit.fakes.nvml import two_h200s
    from tests.exporters.conftest import FIXTURES

    monkeypatch.setattr(socket, "gethostname", lambda: "GPU-12")
    monkeypatch.delenv("NODE_NAME", raising=False)
    roots = Roots(proc_root=str(FIXTURES / "proc"))
    exporter = Exporter(
        "dcgm-exporter", [NvmlSource(Options().hostname, nvml=two_h200s(), roots=roots)]
    )
    hostnames = {
        sample.labels["Hostname"]
        for family in exporter.registry.collect()
        for sample in family.samples
        if "Hostname" in sample.labels
    }
    assert hostnames == {"gpu-12"}
