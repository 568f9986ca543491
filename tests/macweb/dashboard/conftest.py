"""Fixtures of the dashboard tests: logged-in clients and a real Prometheus with charts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from django.test import Client

from testkit import dashboard_servers as servers
from testkit.dashboard_servers import PrometheusServer
from testkit.processes import stop_process


@pytest.fixture
def client_user(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def client_staff(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@dataclass
class ChartEnv:
    """A real Prometheus scraping one NVIDIA node, one AMD node and RDMA counters."""

    prometheus: PrometheusServer
    nvidia_host: str = "chart-nv"
    nvidia_id: int = 900001
    amd_host: str = "chart-amd"
    amd_id: int = 900002

    def labels(self, vendor: str) -> dict[str, str]:
        """The labels scraping.targets gives a node's targets."""
        if vendor == "amd":
            return {"node": str(self.amd_id), "hostname": self.amd_host, "gpu_vendor": "amd"}
        return {"node": str(self.nvidia_id), "hostname": self.nvidia_host, "gpu_vendor": "nvidia"}


@pytest.fixture(scope="session")
def chart_env(tmp_path_factory) -> ChartEnv:
    if not Path(servers.PROMETHEUS).exists():
        pytest.skip(f"{servers.PROMETHEUS} is not installed (apt install prometheus)")
    env = ChartEnv(prometheus=None)  # type: ignore[arg-type]
    sys_proc, sys_addr = servers.start_sys_exporter()
    hardware = [
        servers.start_hardware_metrics(servers.HardwareReadings(env.nvidia_host, "nvidia", nics=0)),
        servers.start_hardware_metrics(servers.HardwareReadings(env.amd_host, "amd", nics=0)),
        servers.start_hardware_metrics(servers.HardwareReadings(env.nvidia_host, "none", nics=2)),
    ]
    (_, nv_addr), (_, amd_addr), (_, nic_addr) = hardware
    targets = [
        servers.Target("sys-exporter", sys_addr, env.labels("nvidia")),
        servers.Target("sys-exporter", sys_addr, env.labels("amd")),
        servers.Target("dcgm-exporter", nv_addr, env.labels("nvidia")),
        servers.Target("rocm-exporter", amd_addr, env.labels("amd")),
        servers.Target("nic-exporter", nic_addr, env.labels("nvidia")),
    ]
    env.prometheus = servers.start_prometheus(targets, tmp_path_factory.mktemp("prometheus"))
    try:
        sel = f'node="{env.nvidia_id}"'
        env.prometheus.wait_for(f"rate(node_cpu_seconds_total{{{sel}}}[1m])")
        env.prometheus.wait_for(f"rate(rdma_rx_bytes_total{{{sel}}}[1m])")
        env.prometheus.wait_for(f'gpu_gfx_activity{{node="{env.amd_id}"}}')
        yield env
    finally:
        env.prometheus.stop()
        stop_process(sys_proc)
        for server, _ in hardware:
            server.shutdown()
