"""MAC_AGENT_NETWORK and `mac start agent --network`: which mode a start picks, and what
it tells Compose and the master.

Docker here is the stand-in of tests/maccli/fake_docker.py (a container table, the
compose files merged as Compose merges them); the master is the real one of
`live_master`, so the mode a registration reports is read back from the inventory.
"""

from __future__ import annotations

import json
import os

import pytest

from contract.services import SERVICES
from maccli.agent import network
from maccli.output import CliError
from maccli.runtimes.docker import DockerRuntime
from node.config import NodeConfig

HOST_FILE, BRIDGE_FILE = "docker-compose.agent.host.yml", "docker-compose.agent.bridge.yml"


def _containers(docker, mode: str | None) -> None:
    """The agent's containers of project mac as a running install has them (none: None)."""
    rows = []
    for service in SERVICES if mode else ():
        on_host = mode == "host" or service.network == "host"
        rows.append(
            {
                "id": f"c-{service.name}",
                "name": f"mac-{service.name}",
                "project": "mac",
                "service": service.name,
                "network": "host" if on_host else "mac_agent",
            }
        )
    (docker / "containers.json").write_text(json.dumps(rows))


def _ups(docker) -> list[str]:
    log = docker / "calls.log"
    calls = log.read_text().splitlines() if log.exists() else []
    return [c for c in calls if c.startswith("compose") and " up -d" in c]


def _networks(docker) -> dict[str, str]:
    rows = json.loads((docker / "containers.json").read_text())
    return {row["service"]: row.get("network", "") for row in rows}


@pytest.fixture
def joined(mac_env, docker, live_master):
    """A node that can join the live master under the stand-in Docker."""
    _containers(docker, None)
    mac_env.env.update(
        {
            "MASTER_IP": "127.0.0.1",
            "MAC_MASTER_PORT": str(live_master.port),
            "NODE_NAME": f"net-{os.getpid()}",
            "MAC_RUNTIME": "docker",
            "MAC_START_TIMEOUT": "0",
        }
    )
    return mac_env


def _registered_mode(mac_env) -> str:
    from inventory.models import Node

    return Node.objects.get(hostname=mac_env.env["NODE_NAME"]).agent_network


@pytest.mark.django_db(transaction=True)
def test_a_new_install_runs_host_mode_saves_it_and_reports_it(joined, docker):
    started = joined.run("start", "agent")

    assert started.returncode == 0, started.stdout + started.stderr
    (up,) = _ups(docker)
    assert "docker-compose.agent.yml -f " in up and up.count(HOST_FILE) == 1
    assert BRIDGE_FILE not in up
    assert set(_networks(docker).values()) == {"host"}
    assert "MAC_AGENT_NETWORK=host" in joined.node_file.read_text()
    said = "Network mode host: the default for a new install. Saved MAC_AGENT_NETWORK=host"
    assert said in started.stdout
    assert "(docker runtime, host network)" in started.stdout
    assert _registered_mode(joined) == "host"


@pytest.mark.django_db(transaction=True)
def test_an_install_that_runs_bridge_keeps_bridge_when_upgraded(joined, docker):
    _containers(docker, "bridge")  # started by an earlier mac: bridge was all it had

    started = joined.run("start", "agent")

    assert started.returncode == 0, started.stdout + started.stderr
    assert BRIDGE_FILE in _ups(docker)[0]
    assert _networks(docker)["sys-exporter"] == "mac_agent"
    assert "MAC_AGENT_NETWORK=bridge" in joined.node_file.read_text()
    assert "already run in bridge mode" in started.stdout
    assert _registered_mode(joined) == "bridge"


@pytest.mark.django_db(transaction=True)
def test_the_flag_wins_is_remembered_and_switches_the_containers(joined, docker):
    joined.run("env", "set", "MAC_AGENT_NETWORK=bridge")  # per-user file
    first = joined.run("start", "agent")
    assert first.returncode == 0, first.stdout + first.stderr
    assert _registered_mode(joined) == "bridge"

    switched = joined.run("start", "agent", "--network", "host")

    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert "Switching the agent from bridge to host network mode" in switched.stdout
    assert HOST_FILE in _ups(docker)[-1]
    assert set(_networks(docker).values()) == {"host"}
    # The bridge that bridge mode left is removed once nothing uses it.
    assert "network rm mac_agent" in (docker / "calls.log").read_text()
    assert "MAC_AGENT_NETWORK=host" in joined.node_file.read_text()
    assert _registered_mode(joined) == "host"
    # Remembered: the next start, without the flag, stays in host mode.
    again = joined.run("start", "agent")
    assert again.returncode == 0 and HOST_FILE in _ups(docker)[-1]
    listed = joined.run("env", "list")
    row = next(line for line in listed.stdout.splitlines() if "MAC_AGENT_NETWORK" in line)
    assert "host" in row and str(joined.node_file) in row


@pytest.mark.django_db(transaction=True)
def test_each_exporter_gets_the_node_s_own_port_from_its_configuration(joined, docker):
    joined.env["MAC_PORT_OFFSET"] = "1000"
    joined.env["MAC_SW_EXPORTER_PORT"] = "39300"

    started = joined.run("start", "agent")

    assert started.returncode == 0, started.stdout + started.stderr
    seen = json.loads((docker / "compose-env.json").read_text())
    assert seen["MAC_SYS_EXPORTER_PORT"] == "30101"  # the table's port plus the offset
    assert seen["MAC_NIC_EXPORTER_PORT"] == "30500"
    assert seen["MAC_SW_EXPORTER_PORT"] == "39300"
    # The master still asks the contract's ports: the start says so, with the way back.
    warned = " ".join(started.stderr.split())
    assert "sys-exporter on 30101 (the master asks 29101)" in warned
    assert "sw-exporter on 39300 (the master asks 29300)" in warned
    assert "will show this node Offline" in warned and "mac env unset MAC_PORT_OFFSET" in warned


@pytest.mark.django_db(transaction=True)
def test_the_contract_s_ports_start_without_a_word_about_them(joined, docker):
    started = joined.run("start", "agent")

    assert started.returncode == 0, started.stdout + started.stderr
    assert "the master asks" not in started.stderr


def test_restart_keeps_the_running_mode_and_says_how_to_switch(mac_env, docker):
    _containers(docker, "bridge")
    # The stand-in runs no container: a restart that waited for answers would fail.
    mac_env.env.update({"MAC_RUNTIME": "docker", "MAC_START_TIMEOUT": "0"})
    mac_env.run("env", "set", "MAC_AGENT_NETWORK=host")

    restarted = mac_env.run("restart", "agent")

    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert "MAC_AGENT_NETWORK=host, but the agent runs in bridge mode" in restarted.stderr
    assert "sudo mac start agent --network host" in restarted.stderr
    assert BRIDGE_FILE in _ups(docker)[-1]
    assert _networks(docker)["sys-exporter"] == "mac_agent"


def test_stop_and_status_use_the_files_of_the_running_mode(mac_env, docker):
    _containers(docker, "bridge")
    mac_env.env["MAC_RUNTIME"] = "docker"

    status = mac_env.run("status", "--json")
    assert json.loads(status.stdout)["network"] == "bridge"
    stopped = mac_env.run("stop", "agent")

    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    down = [c for c in (docker / "calls.log").read_text().splitlines() if c.endswith(" down")]
    assert BRIDGE_FILE in down[-1]  # so that Compose removes the agent bridge too
    assert _networks(docker) == {}


def test_mac_env_set_refuses_a_mode_that_does_not_exist(mac_env):
    refused = mac_env.run("env", "set", "MAC_AGENT_NETWORK=nat")

    assert refused.returncode == 1
    assert "MAC_AGENT_NETWORK='nat' is not a network mode: use host" in refused.stderr
    assert "or bridge" in refused.stderr
    assert not mac_env.user_file.exists() or "nat" not in mac_env.user_file.read_text()
    assert mac_env.run("env", "set", "MAC_AGENT_NETWORK=bridge").returncode == 0


@pytest.mark.django_db(transaction=True)
def test_a_bad_mode_in_a_file_stops_the_start_before_anything_runs(joined, docker):
    joined.node_file.parent.mkdir(parents=True, exist_ok=True)
    joined.node_file.write_text("MAC_AGENT_NETWORK=Host\n")  # edited by hand

    refused = joined.run("start", "agent")

    assert refused.returncode == 1
    assert "MAC_AGENT_NETWORK='Host' is not a network mode" in refused.stderr
    assert "(set in per-node file)" in refused.stderr
    assert "mac env set MAC_AGENT_NETWORK=host" in refused.stderr
    assert _ups(docker) == []
    # A typo never keeps a node from leaving: stop warns and goes on.
    stopped = joined.run("stop", "agent")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "is not host or bridge; ignored" in stopped.stderr


def test_a_bad_flag_and_a_flag_for_the_master_are_refused(mac_env):
    bad = mac_env.run("start", "agent", "--network", "nat")
    assert bad.returncode == 2
    assert "invalid choice: 'nat' (choose from 'host', 'bridge')" in bad.stderr
    master = mac_env.run("start", "master", "--network", "host")
    assert master.returncode == 2
    assert "--network is the agent's network mode; the master has none." in master.stderr


def _config(mac_env, **values: str) -> NodeConfig:
    return NodeConfig.load({**mac_env.env, **values})


def test_a_node_registered_by_an_older_mac_keeps_bridge(mac_env, docker, monkeypatch):
    """No containers (removed by hand) but a node key and no mode beside it: an earlier
    `mac` registered it, and its Docker agent could only run bridge."""
    _containers(docker, None)
    monkeypatch.setenv("PATH", mac_env.env["PATH"])
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    mac_env.node_file.parent.mkdir(parents=True, exist_ok=True)
    mac_env.node_file.write_text("MAC_NODE_KEY=older-key\n")
    runtime = DockerRuntime()

    mode = network.choose_for_start(_config(mac_env), runtime, [], None)

    assert mode == "bridge" and runtime.network == "bridge"
    assert "MAC_AGENT_NETWORK=bridge" in mac_env.node_file.read_text()
    # Decided once: the file now says it, whatever runs.
    assert network.choose_for_start(_config(mac_env), DockerRuntime(), [], None) == "bridge"


def test_the_process_runtime_is_host_and_refuses_bridge(mac_env):
    from maccli.runtimes.process import ProcessRuntime

    runtime = ProcessRuntime(mac_env.state_dir)
    with pytest.raises(CliError) as caught:
        network.choose_for_start(_config(mac_env), runtime, [], "bridge")
    assert "--network bridge needs the docker runtime" in caught.value.message
    assert "mac start agent --runtime docker --network bridge" in caught.value.commands
    assert network.reported_network(runtime) == "host"
    # Set for the cluster (a shared home) but not possible here: host, with a warning.
    cfg = _config(mac_env, MAC_AGENT_NETWORK="bridge")
    assert network.choose_for_start(cfg, runtime, [], None) == "host"


PRIVATE_ROOT = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
SHARED_ROOT = "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
SLAVE_ROOT = "2 1 0:5 / / rw master:1 - overlay overlay rw\n"


def test_it_reads_whether_the_host_s_root_propagates_mounts():
    assert network.root_propagates(SHARED_ROOT) is True
    assert network.root_propagates(SLAVE_ROOT) is True  # e.g. inside `ip netns exec`
    assert network.root_propagates(PRIVATE_ROOT) is False
    # The last mount on / is the one a process sees.
    assert network.root_propagates(SHARED_ROOT + PRIVATE_ROOT) is False
    assert network.root_propagates("") is False


def test_sys_exporter_gets_rslave_where_docker_allows_it_else_plain_read_only(
    mac_env, monkeypatch, capsys
):
    proc = mac_env.root / "proc" / "self"
    proc.mkdir(parents=True)
    monkeypatch.delenv(network.ROOTFS_KEY, raising=False)
    (proc / "mountinfo").write_text(SHARED_ROOT)
    runtime = DockerRuntime()
    network.prepare_rootfs_mount(_config(mac_env), runtime)
    assert network.ROOTFS_KEY not in runtime.values  # the overlay's default: ro,rslave

    (proc / "mountinfo").write_text(PRIVATE_ROOT)
    network.prepare_rootfs_mount(_config(mac_env), runtime)
    # Handed to Compose's process alone, never to mac's own environment.
    assert runtime.values[network.ROOTFS_KEY] == "ro"
    assert network.ROOTFS_KEY not in os.environ
    assert "sudo mount --make-rshared /" in capsys.readouterr().err

    # An operator's own value is never replaced.
    runtime = DockerRuntime()
    monkeypatch.setenv(network.ROOTFS_KEY, "ro,rshared")
    network.prepare_rootfs_mount(_config(mac_env, MAC_ROOTFS_OPTIONS="ro,rshared"), runtime)
    assert network.ROOTFS_KEY not in runtime.values
    assert os.environ[network.ROOTFS_KEY] == "ro,rshared"


def test_a_failed_up_names_compose_s_error_not_its_last_line():
    from maccli.runtimes.docker import compose_errors

    output = (
        "Creating mac-sys-exporter ... error\n\n"
        "ERROR: for mac-sys-exporter  Cannot start service sys-exporter: path / is mounted "
        "on / but it is not a shared or slave mount\n"
        "Creating mac-sw-exporter ... done\n\n"
        "ERROR: for sys-exporter  Cannot start service sys-exporter: path / is mounted on / "
        "but it is not a shared or slave mount\n"
        "Encountered errors while bringing up the project.\n"
    )
    assert compose_errors(output, 1) == (
        "Cannot start service sys-exporter: path / is mounted on / but it is not a shared "
        "or slave mount"
    )
    assert compose_errors("pulling...\nno such image\n", 1) == "no such image"
    assert compose_errors("", 3) == "exit code 3"


@pytest.mark.django_db(transaction=True)
def test_bridge_mode_warns_that_the_ip_forward_reassert_does_nothing_there(joined, docker):
    joined.run("env", "set", "--node", "MAC_IPFORWARD_REASSERT=1")

    bridge = joined.run("start", "agent", "--network", "bridge")
    assert bridge.returncode == 0, bridge.stdout + bridge.stderr
    said = bridge.stdout + bridge.stderr
    assert "MAC_IPFORWARD_REASSERT=1 does nothing in bridge mode" in said
    assert "sudo mac start agent --network host" in said

    host = joined.run("start", "agent", "--network", "host")
    assert host.returncode == 0, host.stdout + host.stderr
    assert "MAC_IPFORWARD_REASSERT" not in host.stdout + host.stderr
