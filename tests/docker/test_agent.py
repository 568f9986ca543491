"""`mac start|status|restart|stop agent` under the docker runtime, on a real engine.

Debian's engine 20.10 with Compose 1.29 (`docker-compose`, no v2 plugin), MAC's image
built offline from the Debian base, and a real master (itself under Docker) that
probes the node from its own containers. A node that never ran MAC is a new install:
its agent runs in host mode (bridge mode is tested in test_ip_forward.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from contract.services import SERVICES
from testkit.docker_engine import NS_IP
from testkit.waiting import http_status, wait_for
from tests.docker.conftest import REPO

# netns too: the engine runs in a namespace of its own (runs with `-m netns` only).
pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
STARTED = {s.name for s in SERVICES} - {"dcgm-exporter", "rocm-exporter"}  # no GPU here


def _online(node) -> bool:
    return node.master_node().get("status") == "online"


def test_it_starts_registers_restarts_and_stops_the_agent_as_the_guide_shows(docker_master, node):
    started = node.mac("start", "agent")
    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.strip().endswith(f"Registered with master {NS_IP}.")

    assert "Network mode host: the default for a new install." in started.stdout
    assert "MAC_AGENT_NETWORK=host" in (node.root / "etc" / "env").read_text()

    containers = node.containers()
    agent = {name: row for name, row in containers.items() if name[4:] in STARTED}
    assert set(agent) == {f"mac-{name}" for name in STARTED}
    for name, row in agent.items():
        labels = row["Config"]["Labels"]
        assert labels["com.docker.compose.project"] == "mac", name
        assert row["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped", name
        # Host mode: every exporter on the node's network, nothing published or DNAT'd.
        assert row["HostConfig"]["NetworkMode"] == "host", name
        assert not row["HostConfig"]["PortBindings"], name
    # node_exporter as its README asks: the host's PID namespace and / read-only (rslave
    # where the host's / propagates; this test host's may be private: maccli.agent.network).
    sys_exporter = agent["mac-sys-exporter"]
    assert sys_exporter["HostConfig"]["PidMode"] == "host"
    root = next(m for m in sys_exporter["Mounts"] if m["Destination"] == "/host/root")
    assert (root["Source"], root["RW"]) == ("/", False)
    # From outside the node: every exporter, straight to the node's own address.
    for service in SERVICES:
        if service.name in STARTED:
            url = f"http://{NS_IP}:{service.port}{service.liveness_path}"
            wait_for(lambda url=url: http_status(url) == 200, timeout=30, what=url, interval=1.0)

    wait_for(lambda: _online(node), timeout=60, what="the node Online on the master", interval=1.0)
    status = wait_for(
        lambda: _all_healthy(node), timeout=60, what="every container Up (healthy)", interval=1.0
    )
    assert status.returncode == 0
    # The table says it as `docker ps` does, not only --json.
    table = node.mac("status")
    rows = {line.split()[0]: line for line in table.stdout.splitlines() if line.strip()}
    for name in STARTED:
        assert "Up (healthy)" in rows[name], table.stdout
    # sys-exporter is node_exporter itself, reading the node's /proc and /sys, with MAC's
    # textfile facts; its container stays healthy.
    metrics = node.sh("curl", "-fsS", f"http://{NS_IP}:29101/metrics").stdout
    for family in ("node_cpu_seconds_total", "node_memory_MemTotal_bytes", "node_load1"):
        assert f"\n{family}" in metrics, family
    assert 'mac_exporter_build_info{service="sys-exporter"' in metrics
    assert "node_textfile_scrape_error 0" in metrics
    # The container's first process became node_exporter (mac-exporter execs it); with
    # the host's PID namespace its /proc/1 is the host's init, so look from outside.
    pid = sys_exporter["State"]["Pid"]
    assert os.readlink(f"/proc/{pid}/exe") == "/usr/bin/prometheus-node-exporter"
    registered = node.engine.docker("logs", "mac-api-server")
    log = registered.stdout + registered.stderr
    assert "/api/v1/register" in log

    restarted = node.mac("restart", "agent")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert "the node stays registered" in restarted.stdout
    wait_for(
        lambda: _online(node),
        timeout=60,
        what="the node Online after mac restart agent",
        interval=1.0,
    )

    stopped = node.mac("stop", "agent")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "Deregistered" in stopped.stdout
    left = [name for name in node.containers() if name[4:] in STARTED]
    assert left == []


def _all_healthy(node):
    import json

    done = node.mac("status", "--json")
    services = json.loads(done.stdout)["services"]
    if all(s["state"] == "running" and s["detail"].endswith(": Up (healthy)") for s in services):
        return done
    return None


def test_agent_containers_come_back_after_the_engine_restarts(docker_master, node):
    started = node.mac("start", "agent")
    assert started.returncode == 0, started.stdout + started.stderr
    wait_for(lambda: _online(node), timeout=60, what="the node Online", interval=1.0)

    node.engine.restart()  # the guide's reboot: nothing but dockerd brings them back

    def back():
        rows = node.containers()
        return all(rows.get(f"mac-{n}", {}).get("State", {}).get("Running") for n in STARTED)

    # The master's containers restart with the engine too: its first sweep after that
    # marks the node, which on a loaded 2-core machine has taken up to 95 s.
    wait_for(back, timeout=120, what="the agent containers running again", interval=1.0)
    wait_for(lambda: _online(node), timeout=180, what="the node Online again", interval=1.0)


def test_in_container_commands_of_the_guide(docker_master, node):
    started = node.mac("start", "agent")
    assert started.returncode == 0, started.stdout + started.stderr
    iface = next(
        line.split(":")[1].strip().split("@")[0]
        for line in node.sh("ip", "-o", "link", "show").stdout.splitlines()
        if "veth" in line or "md" in line.split(":")[1]
    )
    stats = node.engine.docker("exec", "mac-nic-exporter", "ethtool", "-S", iface)
    assert stats.returncode == 0, stats.stderr
    assert "peer_ifindex" in stats.stdout or "NIC statistics" in stats.stdout
    # No AMD GPU here, so no rocm-exporter container: rocm-smi itself, in the same image.
    smi = node.engine.docker("run", "--rm", "--entrypoint", "rocm-smi", "mac:latest")
    assert "amdgpu" in (smi.stdout + smi.stderr), smi.stdout + smi.stderr


def test_the_gpu_exporter_s_container_reads_the_host_s_kernel_log(engine, images):
    """What docker-compose.agent.yml gives dcgm-exporter (a device, a capability) lets it
    read the host's /dev/kmsg, the XIDs from before it started (node.gpu.kernel_log). The
    service itself needs an NVIDIA GPU to start, so its options are tried on the image."""
    compose = yaml.safe_load((REPO / "docker" / "docker-compose.agent.yml").read_text())
    dcgm = compose["services"]["dcgm-exporter"]
    device = [f"--device={path}" for path in dcgm["devices"]]
    caps = [f"--cap-add={cap}" for cap in dcgm["cap_add"]]
    read = (
        "from pathlib import Path; from node.gpu.kernel_log import read_kernel_xids; "
        "print(len(read_kernel_xids(Path('/dev/kmsg'))), 'XIDs')"
    )

    def run(*options: str):
        return engine.docker("run", "--rm", *options, "--entrypoint", "python", images, "-c", read)

    done = run(*device, *caps)
    assert done.returncode == 0 and done.stdout.endswith(" XIDs\n"), done.stdout + done.stderr
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1":
        refused = run(*device)  # the capability is there for a reason
        assert refused.returncode != 0 and "Operation not permitted" in refused.stderr
