"""A private Docker engine for the whole session, MAC's images built on it once, and `mac`.

The engine runs in a network namespace of its own (testkit.docker_engine); the host is
the outside world, 198.18.250.1, that reaches the node at 198.18.250.2. `mac` runs
inside the namespace, as it would on the node. The images are built the documented way,
`scripts/docker-base` (Debian packages, no registry) then `scripts/docker-images`
(wheels from this host), once. Tests skip only where no engine can run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.alerting import WebhookReceiver
from testkit.docker_engine import HOST_IP, NS_IP, DockerEngine, why_unavailable
from testkit.macenv import scratch_mac_env
from testkit.waiting import http_status, wait_for

REPO = Path(__file__).resolve().parents[2]
# The session's Docker master closes /metrics with it; its Prometheus must send it.
METRICS_TOKEN = f"docker-metrics-{os.getpid()}"


@pytest.fixture(scope="session")
def engine() -> Iterator[DockerEngine]:
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    # On a machine where other engines ran before: MAC's isolation must not depend on
    # what they left (testkit.docker_engine, issue 31).
    started = DockerEngine(tag=f"h{os.getpid() % 100000}", leftovers=True).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def images(engine: DockerEngine) -> str:
    """mac:latest on the Debian base, built by the documented commands, once per session."""
    for script in ("scripts/docker-base", "scripts/docker-images"):
        done = subprocess.run(
            [str(REPO / script)], env=engine.env(), capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{script} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    return "mac:latest"


@dataclass
class Node:
    """`mac` on the node (inside the engine's namespace), with its own configuration."""

    engine: DockerEngine
    root: Path
    env: dict[str, str]
    # What `mac start master` printed (the master's fixture): the admin password, once.
    started: str = ""

    def mac(
        self, *args: str, timeout: float = 300, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.engine.ns_command(sys.executable, "-m", "maccli.main", *args),
            capture_output=True, text=True, env=env or self.env, timeout=timeout, check=False,
        )  # fmt: skip

    def sh(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.engine.ns_command(*argv), capture_output=True, text=True, env=self.env,
            timeout=timeout, check=False,
        )  # fmt: skip

    def on_loopback(self, url: str, *curl: str) -> object:
        """The JSON answer of `url` asked from the node itself (its 127.0.0.1, where
        the master's Prometheus and Alertmanager are published); None when none came."""
        done = self.sh("curl", "-s", "-m", "5", *curl, url)
        try:
            return json.loads(done.stdout or "null")
        except ValueError:
            return None

    def master_node(self) -> dict:
        """What the master says of this node (GET /api/v1/nodes/self, with its key)."""
        done = self.mac("status", "--json")
        return json.loads(done.stdout).get("master") or {}

    def ca(self) -> bytes:
        """The master's CA, as kept in the mac-tls volume."""
        done = self.engine.docker("exec", "mac-proxy", "cat", "/var/lib/mac-tls/ca.pem")
        assert done.returncode == 0, done.stderr
        return done.stdout.encode()

    def containers(self) -> dict[str, dict]:
        ids = self.engine.docker("ps", "-aq", "--filter", "name=^/mac-").stdout.split()
        rows = json.loads(self.engine.docker("inspect", *ids).stdout) if ids else []
        return {row["Name"].lstrip("/"): row for row in rows}


@pytest.fixture(scope="session")
def node_env(engine: DockerEngine, tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("docker-node")
    (root / "home" / ".mac").mkdir(parents=True)
    return scratch_mac_env(
        root,
        **{
            "DOCKER_HOST": engine.host,
            "HOME": str(root / "home"),
            "MAC_USER_ENV_FILE": str(root / "home" / ".mac" / "env"),
            "MAC_NODE_ENV_FILE": str(root / "etc" / "env"),
            "MAC_RUNTIME": "docker",
            "MASTER_IP": NS_IP,
            "NODE_NAME": f"docker-node-{os.getpid()}",
            # Fast health checks and sweeps, so that the tests wait seconds, not minutes.
            "MAC_HEALTHCHECK_INTERVAL": "2s",
            "MAC_PROBE_INTERVAL": "3",
            "MAC_PROBE_TIMEOUT": "2",
        },
    )


@pytest.fixture(scope="session")
def master_webhook(engine) -> Iterator[WebhookReceiver]:
    """A webhook on the host's end of the engine's veth: the master's notification channel."""
    receiver = WebhookReceiver(host=HOST_IP)
    yield receiver
    receiver.close()


@pytest.fixture(scope="session")
def docker_master(engine, images, node_env, master_webhook, tmp_path_factory) -> Node:
    """`mac start master` under Docker in the namespace; it stays up for the session."""
    master = Node(engine, tmp_path_factory.mktemp("docker-master"), dict(node_env))
    # From the env file, as an operator sets them: `mac` hands them to Compose.
    for setting in (
        f"MAC_METRICS_TOKEN={METRICS_TOKEN}",
        f"MAC_ALERT_WEBHOOK_URL={master_webhook.url}",
        "MAC_ALERT_GROUP_WAIT=1s",  # passed through without a value in the compose file
    ):
        saved = master.mac("env", "set", setting)
        assert saved.returncode == 0, saved.stderr
    done = master.mac("start", "master")
    assert done.returncode == 0, done.stdout + done.stderr
    master.started = done.stdout
    try:
        wait_for(
            lambda: http_status(f"http://{NS_IP}:28080/health") == 200,
            what="the master's /health",
            timeout=120,
            interval=1.0,
        )
    except BaseException:
        logs = engine.docker("logs", "--tail", "40", "mac-api-server")
        inside = master.sh("curl", "-s", "-m", "3", "http://127.0.0.1:28080/health")
        print(f"api-server:\n{logs.stdout}{logs.stderr}\nfrom inside: {inside.stdout}")
        print(engine.docker("ps", "-a").stdout)
        raise
    return master


@pytest.fixture
def node(engine, images, node_env, tmp_path) -> Iterator[Node]:
    """A node with its own files; whatever agent it started is stopped afterwards."""
    env = {**node_env, "MAC_NODE_ENV_FILE": str(tmp_path / "etc" / "env")}
    env["MAC_STATE_DIR"] = str(tmp_path / "state")
    agent = Node(engine, tmp_path, env)
    yield agent
    agent.mac("stop", "agent")
    engine.set_ip_forward(True)
