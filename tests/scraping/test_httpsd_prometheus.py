"""Two real Prometheus servers (Debian's /usr/bin/prometheus), each on its http_sd shard.

The configs are the ones `manage.py prometheus_config --shard K --of 2` writes; the
master is pytest-django's live server, the agents a simulated fleet. Together the two
servers must scrape every target exactly once. A third Prometheus, reading the
file-SD files with Prometheus's own `hashmod` relabelling, checks the documented
claim that a node's shard is hashmod of its `node` label.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from django.core.management import call_command

from healthcheck.sweep import run_sweep
from scraping.promconfig import render_prometheus_config
from testkit.waiting import wait_for
from tests.healthcheck.conftest import PROMETHEUS_MARKS, prometheus_get, start_prometheus

TOKEN = "sd-token-for-the-prometheus-test"
NODES = 16
pytestmark = PROMETHEUS_MARKS


def scraped(api: str) -> dict[tuple[str, str], str]:
    """{(job, instance): health} of the server's active targets."""
    data = (prometheus_get(api + "/api/v1/targets?state=active") or {}).get("data", {})
    return {
        (t["labels"]["job"], t["labels"]["instance"]): t["health"]
        for t in data.get("activeTargets", [])
    }


def up_series(api: str) -> set[tuple[str, str]]:
    """(job, instance) of every `up == 1` series: what this server really scraped."""
    data = (prometheus_get(api + "/api/v1/query?query=up%3D%3D1") or {}).get("data", {})
    return {(r["metric"]["job"], r["metric"]["instance"]) for r in data.get("result", [])}


@pytest.fixture
def online_fleet(fleet, make_node, fast_probes, sd_dir, sweep_redis, settings):
    """NODES simulated agents, registered and swept Online, with MAC_SD_TOKEN set."""
    settings.SD_TOKEN = TOKEN
    runner = fleet(NODES)
    nodes = [make_node(ip=node.ip) for node in runner.nodes]
    run_sweep()
    return runner, nodes


@pytest.mark.django_db(transaction=True)
def test_two_prometheus_servers_on_their_shards_scrape_every_target_exactly_once(
    online_fleet, live_server, processes, tmp_path
):
    runner, _ = online_fleet
    master = live_server.url.removeprefix("http://")
    apis = []
    for shard in (0, 1):
        work = tmp_path / f"shard-{shard}"
        call_command(
            "prometheus_config", "--out", str(work / "prometheus.yml"), "--master", master,
            "--shard", str(shard), "--of", "2", "--scrape-interval", "1s",
        )  # fmt: skip
        apis.append(start_prometheus(processes, work, f"prometheus-{shard}")[1])

    expected = {("mac-master", master)}
    for node in runner.nodes:
        expected |= {("sys-exporter", f"{node.ip}:29101"), ("nic-exporter", f"{node.ip}:29500")}

    def both_discovered_everything() -> bool:
        return set(scraped(apis[0])) | set(scraped(apis[1])) == expected

    wait_for(both_discovered_everything, timeout=30, interval=0.3)
    first, second = (set(scraped(api)) for api in apis)
    assert first & second == set()  # no target twice
    assert first and second  # and both servers got a share
    # Only shard 0 scrapes the master itself.
    assert ("mac-master", master) in first
    # Each node's jobs sit on one server: its shard.
    for targets in (first, second):
        ips = {instance.rsplit(":", 1)[0] for job, instance in targets if job != "mac-master"}
        assert all(("sys-exporter", f"{ip}:29101") in targets for ip in ips)
    # Scraped for real, each target by exactly one server.
    wait_for(lambda: up_series(apis[0]) | up_series(apis[1]) == expected, timeout=30, interval=0.3)
    assert up_series(apis[0]) & up_series(apis[1]) == set()


@pytest.mark.django_db(transaction=True)
def test_a_shard_is_prometheus_hashmod_of_the_node_label(
    online_fleet, live_server, processes, tmp_path, sd_dir
):
    master = live_server.url.removeprefix("http://")
    sharded = tmp_path / "shard-0"
    call_command(
        "prometheus_config", "--out", str(sharded / "prometheus.yml"), "--master", master,
        "--shard", "0", "--of", "2",
    )  # fmt: skip
    check = subprocess.run(
        ["promtool", "check", "config", str(sharded / "prometheus.yml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr

    # The reference: file-SD (the sweep's files) and Prometheus's own hashmod, keep 0 of 2.
    reference = tmp_path / "hashmod"
    reference.mkdir()
    config = render_prometheus_config(str(sd_dir), [master], services=["sys-exporter"])
    job = config["scrape_configs"][1]
    job["relabel_configs"] = [
        {"source_labels": ["node"], "modulus": 2, "target_label": "__tmp_shard",
         "action": "hashmod"},
        {"source_labels": ["__tmp_shard"], "regex": "0", "action": "keep"},
    ]  # fmt: skip
    (reference / "prometheus.yml").write_text(yaml.safe_dump(config))
    apis = [
        start_prometheus(processes, sharded, "prometheus-sd")[1],
        start_prometheus(processes, reference, "prometheus-hashmod")[1],
    ]

    def sys_targets(api: str) -> set[str]:
        return {instance for job, instance in scraped(api) if job == "sys-exporter"}

    wait_for(lambda: sys_targets(apis[0]) and sys_targets(apis[1]), timeout=30, interval=0.3)
    assert sys_targets(apis[0]) == sys_targets(apis[1])
