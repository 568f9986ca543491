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

from alerting import nodealerts
from healthcheck.sweep import run_sweep
from inventory.models import Node
from scraping.promconfig import ALERT_RULES, render_prometheus_config
from scraping.targets import SCRAPED_SERVICES, write_targets
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
    simulated.inject(by_profile["nvidia"].ip, "xid", 2, 95)  # uncontained: reset the GPU
    simulated.inject(by_profile["nvidia"].ip, "xid", 1, 31)  # the job's page fault: no alert
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
    assert (str(nvidia.pk), "1") not in fired["GpuXidError"]
    assert fired["GpuEccUncorrectableErrors"] == {(str(amd.pk), "6")}


class Sweeper:
    """The master's beat and worker in a thread: a sweep, then the node alerts' post, every
    second, as `probe_fleet` and `post_node_alerts` would run them."""

    def __init__(self) -> None:
        import threading

        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from django.db import connection

        from alerting.nodealerts import post_node_alerts

        try:
            while not self.stop.wait(1.0):
                run_sweep()
                post_node_alerts()
        except BaseException as exc:  # the test reports it
            self.errors.append(exc)
        finally:
            connection.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.fixture
def alerting_prometheus(tmp_path, processes, sd_dir, live_server, settings) -> dict:
    """A real Alertmanager, and Prometheus with every MAC rule's `for:` cut to 2 s (as
    MAC_ALERT_FOR renders them), sending to it."""
    from alerting import services
    from scraping.promconfig import render_alert_rules, shipped_rule_names
    from testkit.alerting import AlertmanagerServer

    settings.ALERTMANAGER_DIR = tmp_path / "alertmanager"
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"
    settings.ALERT_GROUP_WAIT = "0s"
    services.apply_channels(reload=False)
    manager = AlertmanagerServer(
        services.config_path(),
        tmp_path / "am-data",
        port=int(settings.ALERTMANAGER_URL.rsplit(":", 1)[1]),
    ).start()
    rules = tmp_path / "rules.yml"
    rules.write_text(render_alert_rules({name: "2s" for name in shipped_rule_names()}))
    port = free_port()
    config = render_prometheus_config(
        str(sd_dir),
        [live_server.url.removeprefix("http://")],
        scrape_interval="1s",
        scrape_timeout="1s",
        sd_refresh_interval="1s",
        rule_files=[str(rules)],
        alertmanagers=[settings.ALERTMANAGER_URL],
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
    yield {"prometheus": api, "alertmanager": manager.url}
    manager.stop()


@pytest.mark.skipif(
    not shutil.which("prometheus-alertmanager"), reason="Debian's Alertmanager is not installed"
)
@pytest.mark.django_db(transaction=True)
def test_a_fault_free_fleet_fires_nothing_and_injected_faults_fire_only_their_nodes(
    alerting_prometheus, fleet, live_server, fast_probes, settings, sd_dir, sweep_redis, user
):
    import time

    prometheus, manager = alerting_prometheus["prometheus"], alerting_prometheus["alertmanager"]
    # The refused node is offline at once whatever the timeout; fast_probes' 0.5 s would let
    # a busy CI machine (this process serves the fleet) take healthy nodes offline too.
    settings.PROBE_TIMEOUT = 3.0
    simulated = fleet(6, profiles=MIX, seed=11, fault_rate=0)
    registered, errors = asyncio.run_coroutine_threadsafe(
        register_fleet(simulated.fleet, live_server.url), simulated.loop
    ).result(60)
    assert (registered, errors) == (6, [])
    sweeper = Sweeper()
    try:
        scraped = [name for node in simulated.nodes for name in node.ports]
        expected = sum(name in SCRAPED_SERVICES for name in scraped) + 1  # + the master

        def targets() -> list[dict]:
            return get_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"]

        # Every target scraped at least once, and every one of them up: sys-manager's
        # /metrics too (the real one serves it, so the simulated one does).
        up = wait_for(
            lambda: (t := targets()) and len(t) >= expected
            and all(x["health"] != "unknown" for x in t) and t,
            timeout=60, interval=0.5,
        )  # fmt: skip
        assert [(t["labels"]["job"], t["lastError"]) for t in up if t["health"] != "up"] == []

        time.sleep(8)  # past every rule's 2 s `for:`, several evaluations and posts

        def firing_in_prometheus() -> list[dict]:
            alerts = get_json(f"{prometheus}/api/v1/alerts")["data"]["alerts"]
            return [a["labels"] for a in alerts if a["state"] == "firing"]

        def in_alertmanager() -> list[dict]:
            return [a["labels"] for a in get_json(f"{manager}/api/v2/alerts")]

        assert firing_in_prometheus() == []
        assert in_alertmanager() == []

        by_profile = {n.hardware.profile.name: n for n in reversed(simulated.nodes)}
        nvidia = Node.objects.get(ip=by_profile["nvidia"].ip)
        cpu = Node.objects.get(ip=by_profile["cpu"].ip)
        simulated.inject(by_profile["nvidia"].ip, "gpu_lost", 4)
        simulated.set_node_mode(by_profile["cpu"].ip, "refuse")

        def alerting_nodes() -> set[tuple[str, str]]:
            return {(a["alertname"], a.get("node", "")) for a in in_alertmanager()}

        wanted = {("GpuFellOffTheBus", str(nvidia.pk)), ("MacNodeOffline", str(cpu.pk))}
        wait_for(lambda: wanted <= alerting_nodes(), timeout=60, interval=0.5)
        time.sleep(4)  # anything else would have come by now
        assert {node for _name, node in alerting_nodes()} == {str(nvidia.pk), str(cpu.pk)}
        [offline] = [a for a in in_alertmanager() if a["alertname"] == "MacNodeOffline"]
        assert set(offline) == set(nodealerts.LABEL_NAMES)

        # The node page's Exporters panel: Prometheus' own word beside MAC's probe
        # (the page asks scrapes.json once drawn).
        client = Client()
        client.force_login(user)

        def exporter_row(node: Node, service: str) -> str:
            page = client.get(f"/nodes/{node.pk}/").content.decode()
            return page.split(f'data-service="{service}"', 1)[1].split("</tr>", 1)[0]

        def scrape(node: Node, service: str) -> dict:
            with override_settings(PROMETHEUS_URL=prometheus, TARGETS_URL=prometheus):
                answer = client.get(f"/nodes/{node.pk}/scrapes.json").json()
            return answer["jobs"].get(service) or {}

        amd_ip = by_profile["amd"].ip
        amd = Node.objects.get(ip=amd_ip)
        assert scrape(amd, "sys-manager")["health"] == "up"
        # A sys-manager that answers MAC's probe (/health) but not Prometheus' scrape,
        # as the simulated one did before it served /metrics.
        port = simulated.fleet.node(amd_ip).ports["sys-manager"]
        simulated.loop_call(port.others.pop, b"/metrics")
        down = wait_for(
            lambda: (job := scrape(amd, "sys-manager")).get("health") == "down" and job,
            timeout=30, interval=0.5,
        )  # fmt: skip
        assert "404" in down["error"]
        assert "badge-exp-up exp-probe" in exporter_row(amd, "sys-manager")  # MAC's probe
    finally:
        sweeper.close()
    assert sweeper.errors == []
