"""The guide's ip_forward failure with real Docker, in both network modes of the agent.

The node (the engine's namespace) runs the agent containers; the master runs in another
namespace, the host's, under the process runtime on 198.18.250.1 (its own address there,
so its ports collide with nothing). Only the node namespace's own net.ipv4.ip_forward is
changed, never the host's.

- host mode (MAC_AGENT_NETWORK=host, the default): every exporter is on the node's own
  network, so forwarding off changes nothing; and sys-exporter (node_exporter) reports the
  node namespace's interfaces;
- bridge mode (the guide's layout): the exporters behind Docker's DNAT time out, the
  node goes Offline with the ip_forward diagnosis, nic-exporter keeps answering.

One master and one agent serve the module: the tests switch the agent's mode with
`mac start agent --network ...`, as an operator would, on the session's engine and image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract.services import SERVICES
from testkit.docker_engine import HOST_IP, NS_IP
from testkit.macenv import free_master_ports, scratch_mac_env
from testkit.waiting import http_status, wait_for
from tests.docker.conftest import Node

pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
INTERVAL, TIMEOUT = 3.0, 2.0  # MAC_PROBE_INTERVAL and MAC_PROBE_TIMEOUT of node_env
STARTED = [s for s in SERVICES if s.name not in {"dcgm-exporter", "rocm-exporter"}]  # no GPU


@pytest.fixture(scope="module")
def host_master(engine, tmp_path_factory) -> Iterator[dict[str, str]]:
    """`mac start master --runtime process` on the host's 198.18.250.1, for the module.

    Every listener on a free port (a master running on this host holds the defaults);
    yields what a node needs to find it: MASTER_IP and the ports.
    """
    root = tmp_path_factory.mktemp("host-master")
    ports = free_master_ports()
    env = scratch_mac_env(  # its own SQLite inventory: no DATABASE_URL
        root,
        **{
            "MAC_DATA_DIR": str(root / "master-data"),
            "MAC_MASTER_BIND": HOST_IP,
            "MAC_REDIS_URL": os.environ["MAC_REDIS_URL"],  # the worker's own (testkit.xdistworker)
            "MAC_PROBE_INTERVAL": str(INTERVAL),
            "MAC_PROBE_TIMEOUT": str(TIMEOUT),
            "MAC_RUNTIME": "process",
            **ports,
        },
    )

    def mac(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "maccli.main", *args],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )  # fmt: skip

    started = mac("start", "master")
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield {"MASTER_IP": HOST_IP, **ports}
    finally:
        mac("stop", "master")


@pytest.fixture(scope="module")
def agent(engine, images, node_env, host_master, tmp_path_factory) -> Iterator[Node]:
    """The node, joined to the host's master; its mode is each test's to choose."""
    root = tmp_path_factory.mktemp("forwarding-node")
    env = {
        **node_env,
        **host_master,
        "MAC_NODE_ENV_FILE": str(root / "etc" / "env"),
        "MAC_STATE_DIR": str(root / "state"),
    }
    node = Node(engine, root, env)
    yield node
    engine.set_ip_forward(True)
    node.mac("stop", "agent")


@pytest.fixture
def forwarding_on(engine) -> Iterator[None]:
    engine.set_ip_forward(True)
    yield
    engine.set_ip_forward(True)


def _start(node: Node, mode: str) -> dict:
    started = node.mac("start", "agent", "--network", mode)
    assert started.returncode == 0, started.stdout + started.stderr
    assert f"(docker runtime, {mode} network)" in started.stdout
    return wait_for(
        lambda: (n := node.master_node()).get("status") == "online" and n,
        timeout=60,
        what=f"Online in {mode} mode",
        interval=1.0,
    )


def _prometheus_jobs(node: Node) -> dict[str, str]:
    # The master's loopback only (issue 22), on the test's own port.
    url = f"http://127.0.0.1:{node.env['MAC_PROMETHEUS_PORT']}/api/v1/targets"
    with urllib.request.urlopen(url, timeout=5) as response:
        targets = json.load(response)["data"]["activeTargets"]
    return {t["labels"].get("job", ""): t["health"] for t in targets}


def _namespace_interfaces(node: Node) -> set[str]:
    """The engine namespace's own links (`ip -o link`), without the @peer suffix."""
    listed = node.sh("ip", "-o", "link", "show").stdout.splitlines()
    return {line.split(":")[1].strip().split("@")[0] for line in listed}


def _network_devices(metrics: str, series: str) -> set[str]:
    """The `device` labels of one series of sys-exporter's page (prometheus_client's parser)."""
    devices = {
        sample.labels["device"]
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == series
    }
    assert devices, f"{series} is missing from sys-exporter's page"
    return devices


def _veth_end(node: Node) -> str:
    """The namespace end of the engine's veth pair (testkit.docker_engine)."""
    return f"md{node.engine.tag}n"[:15]


def test_host_mode_survives_forwarding_off_and_reports_the_node_s_own_interfaces(
    agent, forwarding_on
):
    node = agent
    online = _start(node, "host")
    assert online["agent_network"] == "host"  # reported at registration
    rows = node.containers()
    for service in STARTED:
        assert rows[f"mac-{service.name}"]["HostConfig"]["NetworkMode"] == "host", service.name

    node.engine.set_ip_forward(False)
    assert node.sh("sysctl", "-n", "net.ipv4.ip_forward").stdout.strip() == "0"
    # Every exporter answers from the master's side: nothing is DNAT'd, nothing forwarded.
    for service in STARTED:
        url = f"http://{NS_IP}:{service.port}{service.liveness_path}"
        assert http_status(url, timeout=TIMEOUT) == 200, url
    # ... and the node stays Online, sweep after sweep.
    deadline = time.monotonic() + 3 * INTERVAL + TIMEOUT
    while time.monotonic() < deadline:
        seen = node.master_node()
        assert seen.get("status") == "online", seen
        time.sleep(1)
    # A target's health stays "unknown" until its first scrape: wait for both to be scraped.
    jobs = wait_for(
        lambda: (
            (j := _prometheus_jobs(node)).get("sys-exporter") == "up"
            and j.get("nic-exporter", "unknown") != "unknown"
            and j
        ),
        timeout=60,
        what="sys-exporter and nic-exporter scraped by the master's Prometheus, forwarding off",
        interval=1.0,
    )
    assert jobs.get("nic-exporter") == "up", jobs

    # node_exporter reads the node's network namespace: its interfaces, not a container's.
    interfaces = _namespace_interfaces(node)
    with urllib.request.urlopen(f"http://{NS_IP}:29101/metrics", timeout=5) as response:
        metrics = response.read().decode()
    interfaces |= _namespace_interfaces(node)  # a container's veth may come or go meanwhile
    veth = _veth_end(node)
    assert veth in interfaces and "eth0" not in interfaces
    for family in ("node_network_receive_bytes_total", "node_network_up"):
        devices = _network_devices(metrics, family)
        assert veth in devices, (family, devices)
        assert "eth0" not in devices, (family, devices)  # no container's own interface
        assert devices <= interfaces, (family, devices - interfaces)


@pytest.fixture
def reassert_on(agent) -> Iterator[None]:
    """MAC_IPFORWARD_REASSERT=1 in the node's file, as an operator sets it."""
    done = agent.mac("env", "set", "--node", "MAC_IPFORWARD_REASSERT=1")
    assert done.returncode == 0, done.stdout + done.stderr
    yield
    agent.mac("env", "unset", "--node", "MAC_IPFORWARD_REASSERT")


def _sys_manager(node: Node) -> dict[tuple[str, tuple], float]:
    """sys-manager's samples, by name and sorted labels (from the master's side)."""
    with urllib.request.urlopen(f"http://{NS_IP}:29103/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _diagnostics() -> dict[str, dict]:
    """sys-manager's /diagnostics (from the master's side), its checks by id."""
    with urllib.request.urlopen(f"http://{NS_IP}:29103/diagnostics", timeout=30) as response:
        return {check["id"]: check for check in json.load(response)["checks"]}


def _reassert_backend(samples: dict) -> tuple[str, float] | None:
    """(reason, availability) of sys-manager's ip_forward_reassert backend, if it has one."""
    for (name, labels), value in samples.items():
        found = dict(labels)
        if name == "mac_exporter_backend_available" and found["backend"] == "ip_forward_reassert":
            return found["reason"], value
    return None


def test_host_mode_sets_ip_forward_back_the_moment_it_drops(agent, forwarding_on, reassert_on):
    node = agent
    _start(node, "host")
    row = node.containers()["mac-sys-manager"]
    assert "NET_ADMIN" in (row["HostConfig"]["CapAdd"] or []), row["HostConfig"]["CapAdd"]
    assert row["Config"]["Env"].count("MAC_IPFORWARD_REASSERT=1") == 1
    wait_for(
        lambda: _reassert_backend(_sys_manager(node)) == ("", 1.0),
        timeout=30,
        what="sys-manager able to set ip_forward back",
        interval=0.5,
    )

    node.engine.set_ip_forward(False)
    wait_for(
        lambda: node.sh("sysctl", "-n", "net.ipv4.ip_forward").stdout.strip() == "1",
        timeout=10,
        what="net.ipv4.ip_forward set back to 1 by sys-manager",
        interval=0.2,
    )
    samples = _sys_manager(node)
    assert samples[("mac_ipforward_reasserts_total", ())] >= 1
    assert samples[("mac_ipforward_resets_total", ())] >= 1
    assert samples[("mac_ipforward_enabled", ())] == 1
    # Every exporter still answers, and the node stays Online.
    assert node.master_node().get("status") == "online"


def test_bridge_mode_says_the_reassert_cannot_work_there(agent, forwarding_on, reassert_on):
    node = agent
    started = node.mac("start", "agent", "--network", "bridge")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "MAC_IPFORWARD_REASSERT=1 does nothing in bridge mode" in started.stdout + started.stderr
    row = node.containers()["mac-sys-manager"]
    assert not row["HostConfig"]["CapAdd"], row["HostConfig"]["CapAdd"]
    reason, available = wait_for(
        lambda: _reassert_backend(_sys_manager(node)),
        timeout=60,
        what="sys-manager's reassert backend in bridge mode",
        interval=1.0,
    )
    assert available == 0 and "bridge mode" in reason and "--network host" in reason


def test_bridge_mode_reproduces_the_guide_s_failure_with_the_ip_forward_diagnosis(
    agent, forwarding_on
):
    node = agent
    online = _start(node, "bridge")
    assert online["agent_network"] == "bridge"
    # The guide's layout: published ports on the agent bridge, nic-exporter on the host.
    for name, row in node.containers().items():
        if name[4:] not in {s.name for s in STARTED}:
            continue
        if name == "mac-nic-exporter":
            assert row["HostConfig"]["NetworkMode"] == "host"
        else:
            assert row["HostConfig"]["NetworkMode"] == "mac_agent", name
            assert row["HostConfig"]["PortBindings"], f"{name} publishes no port"
    # sys-manager's own namespace is the bridge's: it asks each running service where it
    # answers from there (by name on the bridge; nic-exporter at the host's address on it),
    # so none of them shows a failure on the master's node page.
    checks = _diagnostics()
    for service in STARTED:
        assert checks[f"service:{service.name}"]["status"] == "pass", checks
    assert "gateway" in checks["service:nic-exporter"]["detail"], checks
    for absent in ("dcgm-exporter", "rocm-exporter"):  # no GPU: no container, not asked
        assert checks[f"service:{absent}"]["status"] == "skip", checks
        assert "has nothing to watch here" in checks[f"service:{absent}"]["detail"], checks
    # sys-exporter's byte counters are its container's own eth0 here (docs/docker.md).
    with urllib.request.urlopen(f"http://{NS_IP}:29101/metrics", timeout=5) as response:
        counted = _network_devices(response.read().decode(), "node_network_receive_bytes_total")
    assert "eth0" in counted and _veth_end(node) not in counted, counted

    node.engine.set_ip_forward(False)
    assert http_status(f"http://{NS_IP}:29500/metrics") == 200
    assert http_status(f"http://{NS_IP}:29101/metrics", timeout=3) is None  # times out
    # A sweep already under way at the switch saw a bridge exporter answer before it and
    # sys-exporter hang after it (exporter_broken, a CI run on a loaded machine): the
    # first sweep that starts with forwarding off must say ip_forward_off.
    offline = wait_for(
        lambda: (
            (n := node.master_node()).get("status") == "offline"
            and n.get("diagnosis") == "ip_forward_off"
            and n
        ),
        timeout=60,
        what="Offline with the ip_forward diagnosis",
        interval=1.0,
    )
    assert "ip_forward" in json.dumps(offline)
    # The master's Prometheus keeps scraping nic-exporter; sys-exporter has dropped out.
    # (A target's health stays "unknown" until its first scrape, up to a scrape interval.)
    jobs = wait_for(
        lambda: (
            "sys-exporter" not in (j := _prometheus_jobs(node))
            and j.get("nic-exporter") != "unknown"
            and j
        ),
        timeout=60,
        what="sys-exporter out of Prometheus's targets, nic-exporter scraped",
        interval=1.0,
    )
    assert jobs.get("nic-exporter") == "up", jobs
    doctor = node.mac("doctor", "--json")
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}
    forwarding = next(c for key, c in checks.items() if "forward" in key)
    assert forwarding["status"] == "fail"
    assert "sysctl -w net.ipv4.ip_forward=1" in forwarding["fix"]

    node.engine.set_ip_forward(True)
    back = time.monotonic()
    wait_for(
        lambda: node.master_node().get("status") == "online",
        timeout=60,
        what="Online again",
        interval=1.0,
    )
    # One interval plus the probe timeout, and the time a `mac status` takes to ask.
    assert time.monotonic() - back <= INTERVAL + TIMEOUT + 3
