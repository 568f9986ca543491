"""The charts find a node the way production does: the sweep's targets file, the master's
generated Prometheus configuration, and the node's real sys-exporter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.test import override_settings

from contract.services import SYS_EXPORTER
from inventory.choices import GpuVendor
from scraping.promconfig import render_prometheus_config
from scraping.targets import write_targets
from testkit import dashboard_servers as servers
from testkit.factories import online_gpu_node
from testkit.ports import check_contract_ports
from testkit.processes import stop_process

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.prometheus,
    pytest.mark.skipif(not Path(servers.PROMETHEUS).exists(), reason="no /usr/bin/prometheus"),
]


def test_charts_follow_the_targets_file_labels(client_user, tmp_path):
    # An address of our own on loopback, so the contract's fixed port 29101 is free there.
    ip = f"127.56.{os.getpid() % 250}.{os.getpid() % 200 + 20}"
    check_contract_ports([ip], [SYS_EXPORTER.port])  # not beside a MAC agent's (a skip)
    node = online_gpu_node(
        hostname="real-agent",
        ip=ip,
        gpu_vendor=GpuVendor.NONE,
        gpu_count=0,
        exporters={SYS_EXPORTER.name: SYS_EXPORTER.port},
    )
    exporter, _ = servers.start_sys_exporter(ip, SYS_EXPORTER.port)
    sd_dir = tmp_path / "targets"
    sd_dir.mkdir()
    row = {
        "id": node.pk,
        "hostname": node.hostname,
        "ip": node.ip,
        "gpu_vendor": node.gpu_vendor,
        "maintenance": node.maintenance,
        "exporters": node.exporters,
        "status": "online",
    }
    write_targets([row], sd_dir)
    config = render_prometheus_config(
        str(sd_dir), master_targets=(), scrape_interval="1s", sd_refresh_interval="1s"
    )
    prometheus = servers.start_prometheus_config(config, tmp_path / "prometheus")
    try:
        prometheus.wait_for(f'rate(node_cpu_seconds_total{{node="{node.pk}"}}[1m])')
        with override_settings(PROMETHEUS_URL=prometheus.url):
            cpu = client_user.get(f"/nodes/{node.pk}/charts/cpu.json").json()
            memory = client_user.get(f"/nodes/{node.pk}/charts/memory.json").json()
    finally:
        prometheus.stop()
        stop_process(exporter)
    assert cpu["empty_reason"] is None, cpu["empty_reason"]
    assert any(v is not None for v in cpu["series"][0]["values"])
    assert memory["empty_reason"] is None, memory["empty_reason"]
