"""A real Prometheus (Debian's /usr/bin/prometheus) reading the sweep's targets files."""

from __future__ import annotations

import signal
import threading
import time

import pytest
import yaml

from healthcheck.sweep import run_sweep
from inventory.models import Node
from scraping.promconfig import render_prometheus_config
from scraping.targets import write_targets
from testkit.simfleet import Mode
from testkit.waiting import wait_for
from tests.healthcheck.conftest import PROMETHEUS_MARKS, prometheus_get, start_prometheus

pytestmark = PROMETHEUS_MARKS
FILE_SD_ERROR = 'msg="Error reading file"'


@pytest.fixture
def prometheus(tmp_path, processes, sd_dir, live_server):
    """Prometheus on a free port scraping every second, with the sweep's targets dir."""
    master = live_server.url.removeprefix("http://")
    config = render_prometheus_config(
        str(sd_dir), [master], scrape_interval="1s", scrape_timeout="1s", sd_refresh_interval="1s"
    )
    sd_dir.mkdir(parents=True, exist_ok=True)
    write_targets([], sd_dir)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    proc, api = start_prometheus(processes, tmp_path, "prometheus", "--web.enable-lifecycle")
    proc.api = api  # type: ignore[attr-defined]
    return proc


def active_targets(api: str) -> list[dict]:
    data = prometheus_get(api + "/api/v1/targets?state=active") or {}
    return data.get("data", {}).get("activeTargets", [])


def up_by_job(api: str, job: str) -> dict[str, str]:
    return {
        t["labels"]["instance"]: t["health"]
        for t in active_targets(api)
        if t["labels"]["job"] == job
    }


@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_online_nodes_and_drops_offline_ones(
    prometheus, fleet, make_node, fast_probes, sd_dir, sweep_redis
):
    runner = fleet(3)
    nodes = [make_node(ip=node.ip) for node in runner.nodes]
    run_sweep()
    api = prometheus.api
    expected = {f"{node.ip}:29101" for node in runner.nodes}

    def all_up():
        seen = up_by_job(api, "sys-exporter")
        return set(seen) == expected and set(seen.values()) == {"up"}

    wait_for(all_up, timeout=20, interval=0.3)
    labels = next(t["labels"] for t in active_targets(api) if t["labels"]["job"] == "nic-exporter")
    assert {"node", "hostname", "gpu_vendor", "maintenance"} <= set(labels)
    # The master's own /metrics is scraped too, and says how many nodes are Online.
    wait_for(
        lambda: (
            up_by_job(api, "mac-master") and set(up_by_job(api, "mac-master").values()) == {"up"}
        ),
        timeout=15,
        interval=0.3,
    )

    runner.set_node_mode(1, Mode.REFUSE)
    run_sweep()
    assert Node.objects.get(pk=nodes[1].pk).status == "offline"
    gone = f"{runner.nodes[1].ip}:29101"
    wait_for(lambda: gone not in up_by_job(api, "sys-exporter"), timeout=15, interval=0.3)
    assert set(up_by_job(api, "sys-exporter")) == expected - {gone}
    # ...but stays visible through the master's /metrics, where an alert can fire.
    wait_for(
        lambda: (
            (prometheus_get(api + "/api/v1/query?query=mac_node_up%3D%3D0") or {})
            .get("data", {})
            .get("result")
        ),
        timeout=15,
        interval=0.3,
    )
    query = prometheus_get(api + "/api/v1/query?query=mac_node_up%3D%3D0")
    assert [r["metric"]["hostname"] for r in query["data"]["result"]] == [nodes[1].hostname]


def _query(api: str, expr: str) -> list[dict]:
    from urllib.parse import quote

    return (
        (prometheus_get(f"{api}/api/v1/query?query={quote(expr)}") or {})
        .get("data", {})
        .get("result", [])
    )


@pytest.mark.django_db(transaction=True)
def test_with_forwarding_off_prometheus_keeps_scraping_nic_exporter_of_the_offline_node(
    prometheus, fleet, make_node, fast_probes, sd_dir, sweep_redis
):
    runner = fleet(2)
    nodes = [make_node(ip=node.ip) for node in runner.nodes]
    run_sweep()
    api = prometheus.api
    sys_addr, nic_addr = f"{runner.nodes[1].ip}:29101", f"{runner.nodes[1].ip}:29500"
    wait_for(lambda: up_by_job(api, "sys-exporter").get(sys_addr) == "up", 20, 0.3)

    # ip_forward=0 on node 1: the bridge sys-exporter times out, host-network nic answers.
    runner.set_mode(1, "sys-exporter", Mode.BLACKHOLE)
    run_sweep()

    offline = Node.objects.get(pk=nodes[1].pk)
    assert (offline.status, offline.diagnosis) == ("offline", "ip_forward_off")
    wait_for(lambda: sys_addr not in up_by_job(api, "sys-exporter"), 15, 0.3)
    assert up_by_job(api, "nic-exporter").get(nic_addr) == "up"
    # Scraped for real after the node went Offline, with the node's labels.
    wait_for(lambda: _query(api, f'up{{job="nic-exporter",node="{offline.pk}"}} == 1'), 15, 0.3)
    # The master's /metrics tells the two apart: node down, its nic-exporter answering.
    exporter = f'mac_node_exporter_up{{hostname="{offline.hostname}"}}'
    wait_for(lambda: len(_query(api, exporter)) == 2, 15, 0.3)
    states = {r["metric"]["service"]: r["value"][1] for r in _query(api, exporter)}
    assert states == {"nic-exporter": "1", "sys-exporter": "0"}
    node_up = _query(api, f'mac_node_up{{hostname="{offline.hostname}"}}')
    assert [r["value"][1] for r in node_up] == ["0"]


def _rows(count: int, offset: int) -> list[dict]:
    return [
        {
            "id": i,
            "hostname": f"load-{i}",
            # Never scraped successfully (nothing listens): only the file matters.
            "ip": f"127.250.{i // 250}.{i % 250 + 1}",
            "gpu_vendor": "none",
            "maintenance": False,
            "status": "online",
            "exporters": {"sys-exporter": 29101},
        }
        for i in range(offset, offset + count)
    ]


@pytest.mark.django_db
def test_prometheus_never_reads_a_half_written_targets_file(prometheus, sd_dir):
    log_path = prometheus.log_path
    small, large = _rows(1500, 0), _rows(1600, 5000)  # ~200 KB files
    stop = threading.Event()

    def reload_often():
        while not stop.is_set():
            prometheus.send_signal(signal.SIGHUP)
            time.sleep(0.1)

    reloader = threading.Thread(target=reload_often)
    reloader.start()
    rewrites = 0
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            write_targets(small if rewrites % 2 else large, sd_dir)
            rewrites += 1
    finally:
        stop.set()
        reloader.join()
    time.sleep(1.5)  # let the last watch events and the 1 s refresh through
    log = log_path.read_text()
    assert rewrites > 20
    assert "Reloading configuration file" in log or "Completed loading of configuration" in log
    assert FILE_SD_ERROR not in log

    # Control: the check does see a torn file, so its silence above means something.
    target = sd_dir / "sys-exporter.json"
    content = target.read_bytes()
    with open(target, "wb") as handle:
        handle.write(content[: len(content) // 2])
    wait_for(lambda: FILE_SD_ERROR in log_path.read_text(), timeout=10, interval=0.2)
