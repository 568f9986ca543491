"""A simulated fleet of mixed hardware against a real master and a real Prometheus.

The nodes register over HTTP with their GPU vendor, model and count; the sweep writes
the targets; Prometheus (Debian's, with MAC's alert rules loaded) scrapes every
exporter of every profile. What a new user should see must then be there: vendor
counts in the API, dcgm-exporter's and AMD's GPU names, RDMA byte rates on every NIC
vendor, data in the dashboard's GPU charts for a node of each vendor, and MAC's alert
rules firing on injected faults (a GPU off the bus, an XID, an uncorrectable ECC error).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import urllib.request
from urllib.parse import quote

import pytest
import yaml
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token

from healthcheck.promconfig import ALERT_RULES, render_prometheus_config
from healthcheck.sweep import run_sweep
from healthcheck.targets import write_targets
from inventory.models import Node
from testkit.ports import free_port
from testkit.simfleet import register_fleet
from tests.healthcheck.conftest import wait_for

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        not shutil.which("prometheus"), reason="Debian's prometheus is not installed"
    ),
]
MIX = "nvidia=2,amd=2,mangoboost=1,cpu=1"
GPU_CHARTS = ("gpu_util", "gpu_memory", "gpu_temp", "gpu_power", "gpu_errors")


def get_json(url: str, headers: dict | None = None) -> dict:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def query(api: str, expr: str) -> list[dict]:
    try:
        return get_json(f"{api}/api/v1/query?query={quote(expr)}")["data"]["result"]
    except OSError:
        return []


@pytest.fixture
def prometheus(tmp_path, processes, sd_dir, live_server) -> str:
    """Prometheus scraping every second, evaluating MAC's alert rules every second."""
    port = free_port()
    config = render_prometheus_config(
        str(sd_dir),
        [live_server.url.removeprefix("http://")],
        scrape_interval="1s",
        scrape_timeout="1s",
        sd_refresh_interval="1s",
        rule_files=[str(ALERT_RULES)],
    )
    sd_dir.mkdir(parents=True, exist_ok=True)
    write_targets([], sd_dir)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    processes.start(
        "prometheus",
        [
            shutil.which("prometheus"),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        env=None,
    )
    api = f"http://127.0.0.1:{port}"
    wait_for(lambda: query(api, "vector(1)"), timeout=30, interval=0.2)
    return api


@pytest.mark.django_db(transaction=True)
def test_a_mixed_fleet_shows_its_gpus_and_rdma_through_master_and_prometheus(
    prometheus, fleet, live_server, fast_probes, sd_dir, sweep_redis, user
):
    simulated = fleet(6, profiles=MIX, seed=11, fault_rate=0)  # only the faults injected
    registered, errors = asyncio.run_coroutine_threadsafe(
        register_fleet(simulated.fleet, live_server.url), simulated.loop
    ).result(60)
    assert (registered, errors) == (6, [])

    token = Token.objects.create(user=user)
    auth = {"Authorization": f"Token {token.key}"}
    for vendor, count in (("nvidia", 2), ("amd", 3), ("none", 1)):
        listed = get_json(f"{live_server.url}/api/v1/nodes/?gpu_vendor={vendor}", auth)
        assert listed["count"] == count, vendor
    by_profile = {n.hardware.profile.name: n for n in reversed(simulated.nodes)}
    nvidia = Node.objects.get(ip=by_profile["nvidia"].ip)
    amd = Node.objects.get(ip=by_profile["amd"].ip)
    assert (nvidia.gpu_model, nvidia.gpu_count) == ("NVIDIA H200", 8)
    assert (amd.gpu_model, amd.gpu_count) == ("AMD Instinct MI300X", 8)

    run_sweep()
    assert set(Node.objects.values_list("status", flat=True)) == {"online"}

    def per_node(expr: str) -> set[str]:
        return {r["metric"]["node"] for r in query(prometheus, expr)}

    nvidia_ids = {str(n.pk) for n in Node.objects.filter(gpu_vendor="nvidia")}
    amd_ids = {str(n.pk) for n in Node.objects.filter(gpu_vendor="amd")}
    wait_for(lambda: per_node("DCGM_FI_DEV_GPU_UTIL") == nvidia_ids, timeout=30, interval=0.5)
    wait_for(lambda: per_node("gpu_gfx_activity") == amd_ids, timeout=30, interval=0.5)
    assert len(query(prometheus, f'DCGM_FI_DEV_GPU_UTIL{{node="{nvidia.pk}"}}')) == 8

    def rdma_vendors() -> set[str]:
        rates = query(prometheus, "sum by (vendor) (rate(rdma_rx_bytes_total[5s])) > 0")
        return {r["metric"]["vendor"] for r in rates}

    wait_for(
        lambda: rdma_vendors() == {"mellanox", "broadcom", "mangoboost"}, timeout=30, interval=0.5
    )
    # Each port within what a 400 Gb/s link can carry.
    for result in query(prometheus, "rate(rdma_tx_bytes_total[5s])"):
        assert 0 <= float(result["value"][1]) <= 400e9 / 8

    client = Client()
    client.force_login(user)

    def charts_drawn(node: Node) -> bool:
        with override_settings(PROMETHEUS_URL=prometheus):
            for name in (*GPU_CHARTS, "rdma"):
                data = client.get(f"/nodes/{node.pk}/charts/{name}.json?range=1h").json()
                values = [v for s in data["series"] for v in s["values"] if v is not None]
                if not values:
                    return False
        return True

    for node in (nvidia, amd):
        wait_for(lambda node=node: charts_drawn(node), timeout=60, interval=1)

    simulated.inject(by_profile["nvidia"].ip, "gpu_lost", 4)
    simulated.inject(by_profile["nvidia"].ip, "xid", 2, 31)
    simulated.inject(by_profile["amd"].ip, "ecc", 6)

    def firing() -> dict[str, set[tuple[str, str]]]:
        alerts = get_json(f"{prometheus}/api/v1/alerts")["data"]["alerts"]
        fired: dict[str, set[tuple[str, str]]] = {}
        for alert in alerts:
            if alert["state"] == "firing":
                labels = alert["labels"]
                gpu = labels.get("gpu") or labels.get("gpu_id", "")
                fired.setdefault(labels["alertname"], set()).add((labels["node"], gpu))
        return fired

    wanted = {"GpuFellOffTheBus", "GpuXidError", "GpuEccUncorrectableErrors"}
    fired = wait_for(lambda: wanted <= set(firing()) and firing(), timeout=30, interval=0.5)
    assert fired["GpuFellOffTheBus"] == {(str(nvidia.pk), "4")}
    assert (str(nvidia.pk), "2") in fired["GpuXidError"]
    assert fired["GpuEccUncorrectableErrors"] == {(str(amd.pk), "6")}
