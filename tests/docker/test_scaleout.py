"""Scale-out mode under the docker runtime, on the real engine: MAC_SCRAPE_SHARDS=2 on the
session's Docker master, over simulated nodes on the host's end of the engine's veth.

`mac start master` adds the store, two scrapers and vmalert as containers of MAC's
image (maccli.master.scaleout.compose_overlay) and puts the targets view in mac-prometheus's
place; turning the setting off takes them away again. The process runtime's test
(tests/maccli/test_scaleout.py) covers the rest of the issue on 40 nodes.

The engines' fault run (issue 31, as tests/maccli/test_scaleout_faults.py under the
process runtime): each engine's container frozen and killed (-9), the store frozen, its
disk filled (a small tmpfs over its volume); /health and the login page answer within
1 s all along, /health names the engine, `restart: unless-stopped` brings it back, and
what was scraped while the store was away reaches it afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.pinning import pinned_context
from scraping.httpsd import shard_of
from testkit.docker_engine import NS_IP
from testkit.enginefaults import Figure, FrontDoorWatch, freeze_then_kill, lost_scrapes
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
DOOR = f"http://{NS_IP}:28080"
# People's pages from another host: over HTTPS, the front door redirects there (issue 31).
PUBLIC = f"https://{NS_IP}:28443"
SCRAPE = 3.0  # MAC_SCRAPE_INTERVAL here, seconds
MIN_FREE = 64 * 2**20  # MAC_METRICS_MIN_FREE_BYTES here: the store's small disk
STORE_DISK = "192m"
HOST_VMALERT = Path(f"/var/tmp/mac-test-vm-{os.getpid()}/vmalert")
FIGURES: list[Figure] = []


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
    fleet = None
    try:
        fleet = FleetThread(ips=NODE_IPS, fault_rate=0).start()
        # vmalert from this host's file, not the image's: as a site runs a newer release.
        HOST_VMALERT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2("/usr/bin/vmalert", HOST_VMALERT)
        _sharding(docker_master, str(SHARDS))
        docker_master.mac("env", "set", f"MAC_VMALERT_BIN={HOST_VMALERT}")
        docker_master.mac("env", "set", f"MAC_SCRAPE_INTERVAL={SCRAPE:g}s")
        docker_master.mac("env", "set", f"MAC_METRICS_MIN_FREE_BYTES={MIN_FREE}")
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
        if fleet is not None:
            fleet.stop()
        engine.remove_host_addresses(NODE_IPS)
        docker_master.mac("env", "unset", "MAC_SCRAPE_INTERVAL")
        docker_master.mac("env", "unset", "MAC_METRICS_MIN_FREE_BYTES")
        docker_master.mac("env", "unset", "MAC_VMALERT_BIN")
        print("\n| fault (Docker) | detected | recovered | slowest /health / login | lost | |")
        for figure in FIGURES:
            print(figure.row())
        if set(ENGINES) & set(docker_master.containers()):  # the last test did not run
            _sharding(docker_master, None)
            docker_master.mac("start", "master", timeout=600)
        shutil.rmtree(HOST_VMALERT.parent, ignore_errors=True)


def test_the_engines_run_in_containers_and_share_the_fleet_by_node(docker_master, scaled):
    for name in ENGINES:
        assert _running(docker_master, name), f"{name} is not running"
    # MAC_VMALERT_BIN: the host's program, mounted read-only where vmalert runs it.
    rules = docker_master.containers()["mac-rules"]
    assert f"exec {HOST_VMALERT} " in " ".join(rules["Config"]["Cmd"])
    [mount] = [m for m in rules["Mounts"] if m["Destination"] == str(HOST_VMALERT)]
    assert (mount["Source"], mount["RW"]) == (str(HOST_VMALERT), False)
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


def _store_query(master):
    def query(promql: str, at: float) -> dict:
        asked = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        return master.on_loopback(f"{STORE}/api/v1/query?{asked}") or {}

    return query


def _lost(master, nodes: dict, start: float, end: float) -> int:
    """Scrapes of our nodes' sys-exporter that never reached the store in the window."""
    selector = f'up{{job="sys-exporter",node=~"{"|".join(nodes)}"}}'
    query = _store_query(master)

    def newest() -> float:
        result = (query(f"timestamp({selector})", time.time()).get("data") or {}).get("result")
        stamps = [float(s["value"][1]) for s in result or []]
        return min(stamps) if len(stamps) == len(nodes) else 0.0

    wait_for(lambda: newest() >= end + 2 * SCRAPE, timeout=90, what="samples past the window")
    return lost_scrapes(query, selector, len(nodes), (start, end), SCRAPE)


def _watch(master) -> FrontDoorWatch:
    """The front door as people on another host reach it: /health over HTTP, the login
    page over HTTPS, trusting the CA the master's proxy keeps."""
    ca = master.engine.docker("exec", "mac-proxy", "cat", "/var/lib/mac-tls/ca.pem")
    assert ca.returncode == 0, ca.stderr
    return FrontDoorWatch(DOOR, people=PUBLIC, context=pinned_context(ca.stdout.encode()))


def _kill(master, container: str, check: str, says: str, fault: str) -> Figure:
    """Freeze the engine's container until /health names it, then kill -9 its process:
    Docker's restart policy runs it again (`detected` from the freeze, `recovered` from
    the kill), as tests/maccli/test_scaleout_faults.py does under supervision."""
    before = master.containers()[container]
    pid = before["State"]["Pid"]
    with _watch(master) as watch:
        run = freeze_then_kill(watch, pid, check, says)
    state = wait_for(
        lambda: (found := _running(master, container)) and found.get("Pid") != pid and found,
        timeout=60,
        what=f"{container} restarted by Docker",
    )
    assert state["Pid"] != pid
    assert master.containers()[container]["RestartCount"] > before["RestartCount"]
    return run.figure(fault, watch)


def test_a_killed_store_is_named_restarted_by_docker_and_nothing_scraped_meanwhile_is_lost(
    docker_master, scaled
):
    figure = _kill(docker_master, "mac-store", "metrics_store", "does not answer",
                   "mac-store killed (-9)")  # fmt: skip
    lost = _lost(docker_master, scaled, figure.at, figure.at + figure.detected + figure.recovered)
    assert lost == 0
    before = _lost(docker_master, scaled, figure.at - 15, figure.at)
    figure.note = f"{before} scrapes it had accepted but held in memory were lost with it"
    FIGURES.append(figure)


def test_a_frozen_store_is_named_and_its_backlog_arrives(docker_master, scaled):
    pid = docker_master.containers()["mac-store"]["State"]["Pid"]
    with _watch(docker_master) as watch:
        time.sleep(1)
        frozen = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            detected = watch.wait("metrics_store", False, frozen, "does not answer")
            time.sleep(10)
        finally:
            os.kill(pid, signal.SIGCONT)
        thawed = time.time()
        back = watch.wait("metrics_store", True, thawed)
        time.sleep(1)
    slowest = watch.kept_open(frozen, back.at)
    lost = _lost(docker_master, scaled, frozen - 4, back.at + 4)
    assert lost == 0
    FIGURES.append(
        Figure("mac-store frozen (SIGSTOP), 10 s", detected.at - frozen, back.at - thawed,
               slowest["health"], slowest["login"], lost, "recovered: from SIGCONT")
    )  # fmt: skip


@pytest.fixture
def small_store_disk(engine, docker_master) -> Iterator[str]:
    """The store's volume on a small tmpfs (its data copied over), for this test only.

    Mounted in dockerd's own mount namespace (`ip netns exec` gave it one), where the
    containers' volumes are mounted from; filled from inside the store's container."""
    volume = json.loads(engine.docker("volume", "inspect", "mac_mac-metrics").stdout)[0]
    folder = volume["Mountpoint"]
    staged = f"{folder}.staged"
    in_engine = ["nsenter", "-t", str(engine.process.pid), "-m"]
    assert engine.docker("stop", "mac-store").returncode == 0
    script = (
        f"cp -a {folder} {staged} && mount -t tmpfs -o size={STORE_DISK} tmpfs {folder} "
        f"&& cp -a {staged}/. {folder}/"
    )
    subprocess.run([*in_engine, "sh", "-c", script], check=True)
    try:
        assert engine.docker("start", "mac-store").returncode == 0
        wait_for(lambda: _running(docker_master, "mac-store"), what="mac-store on its small disk")
        wait_for(
            lambda: docker_master.on_loopback(f"{STORE}/api/v1/query?query=1") is not None,
            timeout=60,
            what="the store answering",
        )
        yield "/var/lib/mac-metrics"  # the volume, as the store's container sees it
    finally:
        engine.docker("stop", "mac-store")
        subprocess.run([*in_engine, "umount", "-l", folder], check=False)
        subprocess.run([*in_engine, "rm", "-rf", staged], check=False)
        engine.docker("start", "mac-store")


def test_a_full_store_disk_is_named_and_its_backlog_arrives_once_freed(
    engine, docker_master, scaled, small_store_disk
):
    wait_for(lambda: _health()["checks"]["metrics_store"]["ok"], timeout=60, what="store well")
    filler = f"{small_store_disk}/filler"
    with _watch(docker_master) as watch:
        time.sleep(1)
        filled = time.time()
        _fill(engine, small_store_disk, filler, 4 * 2**20)
        try:
            detected = watch.wait("metrics_store", False, filled, "MAC_METRICS_MIN_FREE_BYTES")
            time.sleep(10)
        finally:
            engine.docker("exec", "mac-store", "rm", "-f", filler)
        freed = time.time()
        back = watch.wait("metrics_store", True, freed)
        time.sleep(1)
    slowest = watch.kept_open(filled, back.at)
    lost = _lost(docker_master, scaled, filled - 4, back.at + 4)
    assert lost == 0
    FIGURES.append(
        Figure("mac-store's disk full (4 MiB left)", detected.at - filled, back.at - freed,
               slowest["health"], slowest["login"], lost, "recovered: from freeing the space")
    )  # fmt: skip


def _health() -> dict:
    with urllib.request.urlopen(f"{DOOR}/health", timeout=10) as answer:
        return json.load(answer)


def _fill(engine, folder: str, filler: str, leave: int) -> None:
    """A file in the store's container that leaves `leave` bytes free on `folder`."""
    free = engine.docker("exec", "mac-store", "df", "-B1", "--output=avail", folder)
    size = int(free.stdout.split()[-1]) - leave
    made = engine.docker("exec", "mac-store", "fallocate", "-l", str(size), filler)
    assert made.returncode == 0, made.stderr


@pytest.mark.parametrize(
    ("container", "check", "says"),
    [
        ("mac-scraper-1", "scrapers", "scraper 1/2"),
        ("mac-rules", "rules", "vmalert"),
        ("mac-prometheus", "targets_view", "targets view"),
    ],
)
def test_a_killed_engine_is_named_and_restarted_by_docker(
    docker_master, scaled, container, check, says
):
    FIGURES.append(_kill(docker_master, container, check, says, f"{container} killed (-9)"))
    if container == "mac-scraper-1":
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
