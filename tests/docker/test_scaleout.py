"""Scale-out mode under the docker runtime, on the real engine: MAC_SCRAPE_SHARDS=2 on the
session's Docker master, over simulated nodes on the host's end of the engine's veth.

`mac start master` adds the store, two scrapers and vmalert as containers of MAC's
image (maccli.scaleout.compose_overlay) and puts the targets view in mac-prometheus's
place; turning the setting off takes them away again. The process runtime's test
(tests/maccli/test_scaleout.py) covers the rest of the issue on 40 nodes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from healthcheck.httpsd import shard_of
from testkit.docker_engine import NS_IP
from testkit.simfleet import FleetThread, register_fleet
from testkit.waiting import http_status, wait_for

# netns too: the engine runs in a namespace of its own (runs with `-m netns` only).
pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]

SHARDS = 2
NODE_IPS = [f"198.18.250.{30 + index}" for index in range(8)]
ENGINES = ("mac-store", "mac-scraper-0", "mac-scraper-1", "mac-rules")
# Published on the master's loopback only: asked from the node itself.
VIEW = "http://127.0.0.1:29090"
STORE = "http://127.0.0.1:29428"


def _scraper_nodes(master, index: int) -> set[str]:
    answer = master.on_loopback(f"http://127.0.0.1:{29430 + index}/api/v1/targets") or {}
    active = (answer.get("data") or {}).get("activeTargets") or []
    return {t["labels"]["node"] for t in active if "node" in t["labels"]}


def _query(master, promql: str) -> list[dict]:
    answer = master.on_loopback(f"{VIEW}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    return ((answer or {}).get("data") or {}).get("result") or []


def _running(master, name: str) -> dict:
    state = master.containers().get(name, {}).get("State", {})
    return state if state.get("Status") == "running" else {}


def _sharding(master, value: str | None) -> None:
    changed = (
        master.mac("env", "set", f"MAC_SCRAPE_SHARDS={value}")
        if value
        else master.mac("env", "unset", "MAC_SCRAPE_SHARDS")
    )
    assert changed.returncode == 0, changed.stdout + changed.stderr


@pytest.fixture(scope="module")
def scaled(engine, docker_master) -> Iterator[dict]:
    """The session's master in scale-out mode with our nodes registered; by node id,
    each simulated node's hostname. Back to one Prometheus afterwards."""
    engine.add_host_addresses(NODE_IPS)
    fleet = FleetThread(ips=NODE_IPS, fault_rate=0).start()
    try:
        _sharding(docker_master, str(SHARDS))
        docker_master.mac("env", "set", "MAC_SCRAPE_INTERVAL=3s")
        started = docker_master.mac("start", "master", timeout=600)
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"{SHARDS} scrapers" in started.stdout
        assert "Compose file: " in started.stdout
        assert "scaleout/docker-compose.scaleout.yml" in started.stdout
        registered, errors = asyncio.run(register_fleet(fleet.fleet, f"http://{NS_IP}:28080"))
        assert registered == len(NODE_IPS) and not errors, errors
        hostnames = {node.hostname for node in fleet.nodes}

        def ours() -> dict[str, str]:
            answer = docker_master.on_loopback(f"{VIEW}/api/v1/targets") or {}
            active = (answer.get("data") or {}).get("activeTargets") or []
            return {
                t["labels"]["node"]: t["labels"]["hostname"]
                for t in active
                if t["labels"].get("hostname") in hostnames
            }

        nodes = wait_for(
            lambda: len(found := ours()) == len(NODE_IPS) and found,
            timeout=120,
            interval=1,
            what="every simulated node's targets on a scraper",
        )
        yield nodes
    finally:
        fleet.stop()
        engine.remove_host_addresses(NODE_IPS)
        docker_master.mac("env", "unset", "MAC_SCRAPE_INTERVAL")
        if set(ENGINES) & set(docker_master.containers()):  # the last test did not run
            _sharding(docker_master, None)
            docker_master.mac("start", "master", timeout=600)


def test_the_engines_run_in_containers_and_share_the_fleet_by_node(docker_master, scaled):
    for name in ENGINES:
        assert _running(docker_master, name), f"{name} is not running"
    shares = [_scraper_nodes(docker_master, index) for index in range(SHARDS)]
    ours = set(scaled)
    for index, share in enumerate(shares):
        assert share & ours == {n for n in ours if shard_of(int(n), SHARDS) == index}
    assert not shares[0] & shares[1]
    assert (shares[0] | shares[1]) >= ours

    shown = docker_master.mac("status", "master")
    assert "scraper-0 (0/2, 127.0.0.1:29430)" in shown.stdout, shown.stdout
    assert "scraper-1 (1/2, 127.0.0.1:29431)" in shown.stdout, shown.stdout
    merged = docker_master.on_loopback(f"{VIEW}/api/v1/targets")["data"]
    assert [s["health"] for s in merged["scrapers"]] == ["up", "up"]


def test_the_store_has_every_node_and_health_watches_it(docker_master, scaled):
    selector = "|".join(scaled)
    promql = f'count(up{{job="sys-exporter",node=~"{selector}"}} == 1)'

    def counted() -> int:
        result = _query(docker_master, promql)
        return int(float(result[0]["value"][1])) if result else 0

    wait_for(
        lambda: counted() == len(scaled),
        timeout=120,
        interval=1,
        what="the store counting every simulated node up",
    )
    health = json.loads(
        docker_master.sh("curl", "-s", "-m", "10", f"http://{NS_IP}:28080/health").stdout
    )
    assert health["checks"]["scrapers"]["ok"], health
    assert health["checks"]["metrics_store"]["ok"], health
    assert "store:29428" in health["checks"]["metrics_store"]["detail"], health


def _probe(master) -> str | None:
    answer = master.on_loopback(f"{STORE}/api/v1/query?query=mac_backup_probe") or {}
    result = (answer.get("data") or {}).get("result") or []
    return result[0]["value"][1] if result else None


def test_backup_and_restore_metrics_through_the_store_volume(
    engine, docker_master, scaled, tmp_path
):
    sample = f"mac_backup_probe 42 {int(time.time() * 1000)}"
    docker_master.sh("curl", "-s", "--data-binary", sample, f"{STORE}/api/v1/import/prometheus")
    wait_for(lambda: _probe(docker_master) == "42", what="the sample in the store")
    folder = tmp_path / "metrics-backup"
    made = docker_master.mac("backup", "metrics", str(folder), timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "docker run --rm --network mac_master" in made.stdout
    assert any(path.is_file() for path in folder.rglob("*"))

    # The store's volume lost: the container and its data gone.
    assert engine.docker("rm", "-f", "mac-store").returncode == 0
    assert engine.docker("volume", "rm", "mac_mac-metrics").returncode == 0
    restored = docker_master.mac("restore", "metrics", str(folder), timeout=300)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "-v mac_mac-metrics:/var/lib/mac-metrics" in restored.stdout
    started = docker_master.mac("start", "master", timeout=600)
    assert started.returncode == 0, started.stdout + started.stderr
    wait_for(lambda: _probe(docker_master) == "42", timeout=60, what="the sample restored")


def test_a_killed_scraper_is_restarted_by_docker(docker_master, scaled):
    before = docker_master.containers()["mac-scraper-1"]
    os.kill(before["State"]["Pid"], signal.SIGKILL)
    wait_for(
        lambda: (
            (state := _running(docker_master, "mac-scraper-1"))
            and state.get("Pid") != before["State"]["Pid"]
        ),
        timeout=60,
        interval=0.5,
        what="mac-scraper-1 restarted",
    )
    assert docker_master.containers()["mac-scraper-1"]["RestartCount"] > before["RestartCount"]
    share = {n for n in scaled if shard_of(int(n), SHARDS) == 1}
    wait_for(
        lambda: share <= _scraper_nodes(docker_master, 1),
        timeout=60,
        interval=1,
        what="its share scraped again",
    )


def test_turning_it_off_brings_prometheus_back_and_removes_the_engines(docker_master, scaled):
    _sharding(docker_master, None)
    started = docker_master.mac("start", "master", timeout=600)
    assert started.returncode == 0, started.stdout + started.stderr
    assert not set(ENGINES) & set(docker_master.containers())
    wait_for(
        lambda: http_status(f"http://{NS_IP}:28080/health") == 200,
        timeout=120,
        interval=1,
        what="the master's /health",
    )
    build = docker_master.on_loopback(f"{VIEW}/api/v1/status/buildinfo") or {}
    assert (build.get("data") or {}).get("version"), build  # Prometheus's own answer
