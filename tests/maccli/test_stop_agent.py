"""`mac stop agent` when the master refuses the deregistration: what it says, what it keeps.

The master is a real HTTP server answering as MAC's API does for a key it does not know
(404, whatever the name) and for another node's key (403).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from testkit.fakehttp import JsonHandler, serving
from testkit.ports import free_port


class _Master(JsonHandler):
    """GET /api/v1/self refuses the key; POST /api/v1/deregister answers `answer`."""

    answer: tuple[int, dict] = (404, {})
    asked: list[tuple[str, dict]] = []

    def do_GET(self):
        self.send_json(403, {"detail": "X-MAC-Node-Key is missing or matches no node"})

    def do_POST(self):
        self.asked.append((self.path, self.read_json()))
        self.send_json(*self.answer)


UNKNOWN_KEY = (
    404,
    {
        "detail": "no registered node holds this node key (the node was removed already, "
        "or an admin reset its key): nothing to deregister."
    },
)
ANOTHER_NODES_KEY = (
    403,
    {
        "detail": "this node key is gpu-02's, and a node deregisters only itself; "
        "an admin can remove gpu-01 in the admin instead."
    },
)


def _stop_against(mac_env, answer: tuple[int, dict]):
    _Master.answer, _Master.asked = answer, []
    node_file = Path(mac_env.env["MAC_NODE_ENV_FILE"])
    node_file.parent.mkdir(parents=True, exist_ok=True)
    node_file.write_text("MAC_NODE_KEY=stale-key\n")
    with serving(_Master) as url:
        mac_env.env.update(
            {
                "MASTER_IP": "127.0.0.1",
                "MAC_MASTER_PORT": str(urlsplit(url).port),
                "NODE_NAME": "gpu-01",
                "MAC_BIND": "127.0.0.1",
                "MAC_AGENT_SERVICES": "sys-exporter",
                "MAC_SYS_EXPORTER_PORT": str(free_port()),
            }
        )
        result = mac_env.run("stop", "agent")
    return result, node_file.read_text()


def test_a_key_the_master_no_longer_knows_is_dropped_without_claiming_a_deregistration(mac_env):
    result, node_file = _stop_against(mac_env, UNKNOWN_KEY)

    assert result.returncode == 0, result.stdout + result.stderr
    assert _Master.asked == [("/api/v1/deregister", {"hostname": "gpu-01"})]
    warned = " ".join(result.stderr.split())
    assert "Warning: The master holds no node with this node's key: nothing deregistered." in (
        warned
    )
    assert "If gpu-01 is still listed there (an admin reset its key), it shows Offline" in warned
    assert "Deregistered" not in result.stdout
    assert "stale-key" not in node_file
    assert "Traceback" not in result.stderr


def test_another_nodes_key_is_an_error_and_the_key_is_kept(mac_env):
    result, node_file = _stop_against(mac_env, ANOTHER_NODES_KEY)

    assert result.returncode == 1
    assert "could not deregister from master at 127.0.0.1: HTTP 403" in result.stderr
    assert "gpu-02's" in result.stderr
    assert "the node stays registered" in result.stderr
    assert "Deregistered" not in result.stdout
    assert "MAC_NODE_KEY=stale-key" in node_file
    assert "Traceback" not in result.stderr
