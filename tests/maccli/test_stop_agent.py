"""`mac stop agent` against a real master (gunicorn + uvicorn on the test database) that
holds no node with the agent's key: what it says, what it keeps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testkit.ports import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_key_the_master_no_longer_knows_is_dropped_without_claiming_a_deregistration(
    mac_env, live_master
):
    from inventory.models import Node
    from inventory.services.keys import hash_node_key

    # An admin reset the node's key: the master keeps the node under another key.
    hostname = f"reset-{os.getpid()}"
    Node.objects.create(
        hostname=hostname, ip="127.77.250.251", node_key_hash=hash_node_key("the-new-key")
    )
    node_file = Path(mac_env.env["MAC_NODE_ENV_FILE"])
    node_file.parent.mkdir(parents=True, exist_ok=True)
    node_file.write_text("MAC_NODE_KEY=the-old-key\n")
    mac_env.env.update(
        {
            "MASTER_IP": "127.0.0.1",
            "MAC_MASTER_PORT": str(live_master.port),
            "NODE_NAME": hostname,
            "MAC_BIND": "127.0.0.1",
            "MAC_AGENT_SERVICES": "sys-exporter",
            "MAC_SYS_EXPORTER_PORT": str(free_port()),
        }
    )

    result = mac_env.run("stop", "agent")

    assert result.returncode == 0, result.stdout + result.stderr
    warned = " ".join(result.stderr.split())
    assert "Warning: The master holds no node with this node's key: nothing deregistered." in (
        warned
    )
    assert f"If {hostname} is still listed there (an admin reset its key), it shows Offline" in (
        warned
    )
    assert "Deregistered" not in result.stdout
    assert "the-old-key" not in node_file.read_text()
    assert Node.objects.filter(hostname=hostname).exists()
    assert "Traceback" not in result.stderr
