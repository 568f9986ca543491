"""`mac start|status|restart|stop agent` with the process runtime against a real master.

The exporters run on the contract ports on an address of 127.0.0.0/8 private to this
run (the master probes the table's ports, as it does in production), and the master
is gunicorn + uvicorn on the test database. A sweep is the probing code's own.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import stat

import pytest

from contract.services import SERVICES
from exporters.__main__ import BUILDERS
from testkit.processes import exited
from tests.maccli.conftest import loopback_address

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _available_services() -> list[str]:
    """The services whose exporter module exists in this tree."""
    return [name for name, module in BUILDERS.items() if importlib.util.find_spec(module)]


def _ports_free(address: str) -> bool:
    for service in SERVICES:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, service.port))
            except OSError:
                return False
    return True


@pytest.fixture
def agent(mac_env, live_master, tmp_path):
    address = loopback_address(0)
    if not _ports_free(address):
        pytest.skip(f"contract ports are busy on {address}")
    mac_env.env.update(
        {
            "MASTER_IP": "127.0.0.1",
            "MAC_MASTER_PORT": str(live_master.port),
            "NODE_NAME": f"e2e-{address.replace('.', '-')}",
            "MAC_BIND": address,
            "MAC_AGENT_IP": address,
            "MAC_AGENT_SERVICES": ",".join(_available_services()),
            "MAC_START_TIMEOUT": "60",
            "MAC_STOP_GRACE": "10",
        }
    )
    yield mac_env, address
    mac_env.run("stop", "agent")  # never leave processes behind, whatever failed


def _pids(mac_env) -> dict[str, int]:
    result = {}
    for path in (mac_env.state_dir / "agent").glob("*.pid"):
        result[path.stem] = json.loads(path.read_text())["pid"]
    return result


def _sweep(tmp_path):
    from healthcheck.sweep import run_sweep

    return run_sweep(sd_dir=tmp_path / "targets")


def test_agent_joins_turns_online_restarts_moves_and_leaves(agent, tmp_path):
    from inventory.choices import EventKind, NodeStatus
    from inventory.models import Node, NodeEvent

    mac_env, address = agent
    hostname = mac_env.env["NODE_NAME"]
    services = mac_env.env["MAC_AGENT_SERVICES"].split(",")

    started = mac_env.run("start", "agent")
    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.strip().splitlines()[-1] == "Registered with master 127.0.0.1."
    node = Node.objects.get(hostname=hostname)
    assert node.ip == address
    assert set(node.exporters) == set(services)
    assert node.agent_version
    assert node.agent_network == "host"  # the process runtime is host by nature
    key_file = mac_env.node_file
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert "MAC_NODE_KEY=" in key_file.read_text()

    _sweep(tmp_path)
    node.refresh_from_db()
    assert node.status == NodeStatus.ONLINE, node.status_detail
    assert all(node.exporter_health.get(name) for name in services if name in node.exporter_health)

    status = mac_env.run("status")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {line.split()[0]: line.split() for line in status.stdout.splitlines() if line.strip()}
    for name in services:
        assert rows[name][1:3] == ["running", "ok"], status.stdout
    assert f"{hostname} ({address}) is Online" in status.stdout

    # A second start reuses everything: same processes, same row.
    pids = _pids(mac_env)
    again = mac_env.run("start", "agent")
    assert again.returncode == 0, again.stderr
    assert _pids(mac_env) == pids
    assert Node.objects.filter(hostname=hostname).count() == 1
    assert Node.objects.get(hostname=hostname).pk == node.pk

    restarted = mac_env.run("restart", "agent")
    assert restarted.returncode == 0, restarted.stderr
    assert "the node stays registered" in restarted.stdout
    new_pids = _pids(mac_env)
    assert set(new_pids) == set(pids) and not set(new_pids.values()) & set(pids.values())
    assert all(exited(pid) for pid in pids.values())
    assert Node.objects.get(hostname=hostname).pk == node.pk

    # The node's address changes: the same row follows it.
    moved_to = loopback_address(1)
    moved = mac_env.run("start", "agent", extra={"MAC_AGENT_IP": moved_to})
    assert moved.returncode == 0, moved.stderr
    node.refresh_from_db()
    assert node.ip == moved_to
    assert Node.objects.filter(hostname=hostname).count() == 1
    assert NodeEvent.objects.filter(node=node, kind=EventKind.IP_CHANGED).exists()

    stopped = mac_env.run("stop", "agent")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"Deregistered {hostname} from master 127.0.0.1." in stopped.stdout
    # Said last: the services stopped, then the node is gone from the master.
    assert stopped.stdout.index("Stopped ") < stopped.stdout.index("Deregistered ")
    assert not Node.objects.filter(hostname=hostname).exists()
    assert _pids(mac_env) == {}
    for pid in new_pids.values():
        assert exited(pid)
    assert "MAC_NODE_KEY" not in key_file.read_text()


def test_stop_with_the_master_down_stops_locally_and_keeps_the_node(agent, tmp_path):
    from inventory.models import Node
    from testkit.ports import free_port

    mac_env, _address = agent
    mac_env.env["MAC_AGENT_SERVICES"] = "sys-exporter"
    hostname = mac_env.env["NODE_NAME"]
    assert mac_env.run("start", "agent").returncode == 0
    pid = _pids(mac_env)["sys-exporter"]
    shown = mac_env.run("status", "--json")
    assert shown.returncode == 0, shown.stdout
    status = json.loads(shown.stdout)
    assert status["ok"] is True and status["runtime"] == "process"
    assert status["services"][0]["name"] == "sys-exporter"
    assert status["services"][0]["state"] == "running" and status["services"][0]["pid"] == pid
    assert status["master"]["hostname"] == hostname

    down = mac_env.run("stop", "agent", extra={"MAC_MASTER_PORT": str(free_port())})
    assert down.returncode == 1
    assert "Error: could not deregister from master at 127.0.0.1: connection refused" in (
        down.stderr
    )
    assert "the node stays registered" in down.stderr
    assert "mac stop agent" in down.stderr
    assert Node.objects.filter(hostname=hostname).exists()
    assert _pids(mac_env) == {}
    assert exited(pid)
