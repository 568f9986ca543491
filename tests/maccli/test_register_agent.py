"""maccli.agent.registration.register against a real master (gunicorn + uvicorn on the
test database): a node whose first answer, the one with its key, was lost is told so, and
the reset it is told to ask for gives it a key."""

from __future__ import annotations

import json
import os
import urllib.request
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
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

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
    assert "POST /api/v1/nodes/<id>/reset-key" in warned
    assert Node.objects.filter(hostname=hostname).count() == 1

    # What the warning says to do, as a staff script does it; then the node has a key.
    staff = User.objects.create_superuser("keeper", "keeper@example.com", "keeper-pass")
    node = Node.objects.get(hostname=hostname)
    request = urllib.request.Request(
        f"http://127.0.0.1:{live_master.port}/api/v1/nodes/{node.pk}/reset-key",
        method="POST",
        headers={"Authorization": f"Token {Token.objects.create(user=staff).key}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert json.load(answer)["reset"] is True
    third = register(_config(tmp_path, live_master.port, hostname), hostname, ip, [], "host")
    assert third["node_key"]
    assert f"MAC_NODE_KEY={third['node_key']}" in (tmp_path / "node-env").read_text()
