"""maccli.agent.registration.register against a real master (gunicorn + uvicorn on the
test database): a node whose first answer, the one with its key, was lost is told so."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from maccli.agent.registration import register
from node.config import NodeConfig

pytestmark = pytest.mark.django_db(transaction=True)


def _config(tmp_path: Path, port: int, hostname: str) -> NodeConfig:
    return NodeConfig(
        environ={"MASTER_IP": "127.0.0.1", "MAC_MASTER_PORT": str(port), "NODE_NAME": hostname},
        node_values={}, user_values={}, node_file=tmp_path / "node-env",
        user_file=tmp_path / "user-env",
    )  # fmt: skip


def test_a_node_whose_key_never_arrived_is_told_what_to_do(live_master, tmp_path, capsys):
    from inventory.models import Node

    hostname, ip = f"lost-{os.getpid()}", "127.77.250.252"
    first = register(_config(tmp_path, live_master.port, hostname), hostname, ip, [], "host")
    assert first["node_key"] and "MAC_NODE_KEY=" in (tmp_path / "node-env").read_text()
    assert "sent no node key" not in capsys.readouterr().err

    # The first answer lost: this node holds no key, the master has issued one.
    (tmp_path / "node-env").unlink()
    again = register(_config(tmp_path, live_master.port, hostname), hostname, ip, [], "host")

    assert "node_key" not in again
    warned = " ".join(capsys.readouterr().err.split())
    assert f"The master knows {hostname} but sent no node key, and this node holds none" in (warned)
    assert "(Nodes > Reset node key)" in warned
    assert Node.objects.filter(hostname=hostname).count() == 1
