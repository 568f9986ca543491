"""Leftovers of a raw `docker compose up` (project deploy), and the master's inventory
and its CA (what the agents' pins name) surviving `mac restart master` and
`docker rm -f`, on the real engine."""

from __future__ import annotations

import pytest
import yaml

from node.checks.docker import REMOVE_STALE_COMMAND
from testkit.waiting import wait_for
from tests.docker.conftest import REPO

# netns too: the engine runs in a namespace of its own (runs with `-m netns` only).
pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
# Read from the master's Compose file, so a service added there is known here too.
MASTER_CONTAINERS = tuple(
    service["container_name"]
    for service in yaml.safe_load((REPO / "docker/docker-compose.master.yml").read_text())[
        "services"
    ].values()
)


def test_it_finds_a_raw_compose_ups_containers_before_dockers_conflict(docker_master, node):
    # An older deployment's files: the agent's services in the guide's bridge layout.
    deploy = ("docker-compose", "-p", "deploy", "-f", str(REPO / "docker/docker-compose.agent.yml"),
              "-f", str(REPO / "docker/docker-compose.agent.bridge.yml"))  # fmt: skip
    raw = node.sh(*deploy, "up", "-d", "--no-build", timeout=300)
    try:
        assert raw.returncode == 0, raw.stderr
        refused = node.mac("start", "agent")
        assert refused.returncode == 1
        assert "(project deploy)" in refused.stderr
        assert 'Conflict. The container name "/mac-...' in refused.stderr
        # Exactly the old deployment's containers, by name: the guide's blanket form would
        # remove the master's too, which share this engine, so it is not offered.
        assert "\n  docker rm -f mac-" in refused.stderr
        assert REMOVE_STALE_COMMAND not in refused.stderr
        projects = {r["Config"]["Labels"]["com.docker.compose.project"] for r in _agent(node)}
        assert projects == {"deploy"}  # nothing of ours was created next to them

        started = node.mac("start", "agent", "--remove-stale")
        assert started.returncode == 0, started.stdout + started.stderr
        projects = {r["Config"]["Labels"]["com.docker.compose.project"] for r in _agent(node)}
        assert projects == {"mac"}
    finally:  # a failure above must not leave the old deployment to the next test
        node.sh(*deploy, "down", "--remove-orphans", timeout=300)


def _agent(node) -> list[dict]:
    return [r for name, r in node.containers().items() if name not in MASTER_CONTAINERS]


def test_the_inventory_and_the_ca_survive_restart_master_and_docker_rm(docker_master, node):
    started = node.mac("start", "agent")
    assert started.returncode == 0, started.stdout + started.stderr
    name = node.env["NODE_NAME"]
    assert node.master_node().get("hostname") == name
    ca = docker_master.ca()

    restarted = docker_master.mac("restart", "master")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert docker_master.ca() == ca
    wait_for(
        lambda: node.master_node(),
        timeout=120,
        what="the node known after mac restart master",
        interval=1.0,
    )
    assert node.master_node()["hostname"] == name

    removed = node.engine.docker("rm", "-f", *MASTER_CONTAINERS)
    assert removed.returncode == 0, removed.stderr
    again = docker_master.mac("start", "master")
    assert again.returncode == 0, again.stdout + again.stderr
    wait_for(
        lambda: node.master_node(),
        timeout=120,
        what="the node known after docker rm -f",
        interval=1.0,
    )
    assert node.master_node()["hostname"] == name
    # The CA lives in the mac-tls volume: the pins agents hold stay valid.
    assert docker_master.ca() == ca
    log = node.engine.docker("logs", "mac-api-server")
    assert "/api/v1/register" not in log.stdout + log.stderr  # a new container: no re-registration
