"""Every way `mac start agent` fails in the guide, with its message and the next command."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest

from testkit.fakehttp import JsonHandler, serving
from testkit.ports import free_port


def _no_traceback(result) -> None:
    assert "Traceback" not in result.stderr + result.stdout


def test_no_master_ip(mac_env):
    result = mac_env.run("start", "agent")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "Error: MASTER_IP is required."
    assert "  mac env set MASTER_IP=<master-ip>" in lines
    assert "  mac start agent" in lines
    assert "  sudo mac env set --node MASTER_IP=<master-ip>" in lines
    assert not mac_env.state_dir.exists(), "nothing may start without MASTER_IP"
    _no_traceback(result)


def test_master_unreachable(mac_env):
    port = free_port()
    mac_env.env.update({"MASTER_IP": "127.0.0.1", "MAC_MASTER_PORT": str(port)})
    result = mac_env.run("start", "agent")
    assert result.returncode == 1
    assert "Error: could not register with master at 127.0.0.1: connection refused" in (
        result.stderr
    )
    assert f"  curl -m5 -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{port}/health" in (
        result.stderr
    )
    assert not mac_env.state_dir.exists()
    _no_traceback(result)


class _Unhealthy(JsonHandler):
    def do_GET(self):
        self.send_json(503, {"status": "unhealthy", "failed": ["redis"]})


def _port(url: str) -> str:
    return str(urlsplit(url).port)


def _start_and_stop_agent(mac_env, master_port: str, **env: str):
    """`mac start agent` (sys-exporter only, on loopback) against 127.0.0.1:master_port."""
    mac_env.env.update(
        {
            "MASTER_IP": "127.0.0.1",
            "MAC_MASTER_PORT": master_port,
            "MAC_BIND": "127.0.0.1",
            "MAC_AGENT_SERVICES": "sys-exporter",
            "MAC_SYS_EXPORTER_PORT": str(free_port()),
            **env,
        }
    )
    try:
        return mac_env.run("start", "agent")
    finally:
        mac_env.run("stop", "agent")


def test_master_answering_unhealthy(mac_env):
    with serving(_Unhealthy) as url:
        mac_env.env.update({"MASTER_IP": "127.0.0.1", "MAC_MASTER_PORT": _port(url)})
        result = mac_env.run("start", "agent")
    assert result.returncode == 1
    assert (
        "Error: could not register with master at 127.0.0.1: the master answers but is not "
        "healthy: HTTP 503 (status: unhealthy, failed: redis)"
    ) in result.stderr


class _SweepsStopped(JsonHandler):
    """A master whose API and database answer while its worker and beat are down."""

    registrations: list[tuple[str, dict]] = []
    failed = ["sweeps"]

    def do_GET(self):
        self.send_json(503, {"status": "unhealthy", "failed": self.failed})

    def do_POST(self):
        payload = self.read_json()
        self.registrations.append((self.path, payload))
        self.send_json(201, {"id": 1, "hostname": payload["hostname"], "node_key": "k" * 43})


class _ProbeQueueUnconsumed(_SweepsStopped):
    """Sweeps stopped because their chunk queue has no consumer (/health's `queues`)."""

    registrations: list[tuple[str, dict]] = []
    failed = ["sweeps", "queues"]


@pytest.mark.parametrize("handler", [_SweepsStopped, _ProbeQueueUnconsumed])
def test_stopped_sweeps_do_not_stop_a_node_from_joining(mac_env, handler):
    with serving(handler) as url:
        result = _start_and_stop_agent(mac_env, _port(url))
    assert result.returncode == 0, result.stderr
    assert "sweeps have stopped" in result.stderr
    assert "Registered with master 127.0.0.1." in result.stdout + result.stderr
    assert [path for path, _ in handler.registrations] == [
        "/api/v1/register",
        "/api/v1/deregister",
    ]
    _no_traceback(result)


def test_empty_node_name(mac_env):
    mac_env.env.update({"MASTER_IP": "127.0.0.1", "NODE_NAME": ""})
    result = mac_env.run("start", "agent")
    assert result.returncode == 1
    assert result.stderr.startswith("Error: NODE_NAME is empty (NODE_NAME is set but empty)")
    assert "  mac env set NODE_NAME=<name>" in result.stderr.splitlines()
    _no_traceback(result)


def test_node_name_pinned_in_a_shared_home(mac_env):
    mac_env.shared_home("nfs4")
    mac_env.user_file.write_text("MASTER_IP=127.0.0.1\nNODE_NAME=gpu-01\n")
    result = mac_env.run("start", "agent", extra={"MAC_MASTER_PORT": str(free_port())})
    assert result.returncode == 1
    assert f"Error: NODE_NAME=gpu-01 is pinned in {mac_env.user_file}, which every node reads" in (
        result.stderr
    )
    assert "nfs4" in result.stderr
    assert str(mac_env.node_file) in result.stderr
    assert "  mac env unset NODE_NAME" in result.stderr.splitlines()
    assert "  sudo mac env set --node NODE_NAME=gpu-01" in result.stderr.splitlines()


def test_master_ip_in_a_shared_home_is_warned_about(mac_env):
    mac_env.shared_home("gpfs")
    mac_env.user_file.write_text("MASTER_IP=127.0.0.1\n")
    result = mac_env.run("start", "agent", extra={"MAC_MASTER_PORT": str(free_port())})
    assert f"Warning: MASTER_IP comes from {mac_env.user_file}, which every node reads" in (
        result.stderr
    )
    assert f"Per-node values belong in {mac_env.node_file}" in result.stderr
    assert "sudo mac env set --node MASTER_IP=127.0.0.1" in result.stderr


@pytest.mark.django_db(transaction=True)
def test_registration_refused_by_the_master_names_the_reason(mac_env, live_master):
    """A host name held by another node (from another address, with a key) gives 403."""
    from inventory.models import Node

    hostname = f"taken-{os.getpid()}"
    Node.objects.create(hostname=hostname, ip="127.77.250.250", node_key_hash="0" * 64)
    result = _start_and_stop_agent(mac_env, str(live_master.port), NODE_NAME=hostname)
    assert result.returncode == 1
    assert "Error: could not register with master at 127.0.0.1: HTTP 403" in result.stderr
    assert "node key" in result.stderr.lower()
    assert "  sudo mac start agent" in result.stderr.splitlines()
    assert Node.objects.get(hostname=hostname).ip == "127.77.250.250"


def test_a_409_says_how_a_node_behind_a_shared_address_gets_its_own(mac_env):
    from contract.master_api import Reply
    from maccli.agent.errors import registration_error
    from node.config import NodeConfig

    cfg = NodeConfig.load({**mac_env.env, "MASTER_IP": "127.0.0.1"})
    said = "10.0.0.5 is registered to gpu-01, another machine (its machine-id differs)"
    error = registration_error(cfg, Reply(409, {"detail": said}, {}))

    assert error.message == (f"could not register with master at 127.0.0.1: HTTP 409 ({said}).")
    assert "nodes behind one NAT" in error.hint
    assert error.commands == [
        "sudo mac env set --node MAC_AGENT_IP=<this node's own address>",
        "sudo mac env set --node MAC_JOIN_TOKEN=<token>",
        "sudo mac start agent",
    ]


def test_another_409_is_left_to_the_masters_words(mac_env):
    from contract.master_api import Reply
    from maccli.agent.errors import registration_error
    from node.config import NodeConfig

    cfg = NodeConfig.load({**mac_env.env, "MASTER_IP": "127.0.0.1"})
    said = "10.0.0.6 is registered to gpu-02; deregister that node first."
    error = registration_error(cfg, Reply(409, {"ip": [said]}, {}))

    assert said in error.message and "MAC_AGENT_IP" not in " ".join(error.commands)
