"""The docker runtime with a stand-in `docker` on PATH: stale containers, profiles, auto choice.

These machines have a Docker client but no engine, so `docker` here is
tests/maccli/fake_docker.py: a small program that keeps a container table and answers
like the engine, Conflict message included.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from maccli.master.preflight import PORT_SETTINGS
from maccli.runtimes.docker import DockerRuntime
from maccli.runtimes.process import ProcessRuntime
from maccli.runtimes.select import choose_runtime
from node.checks.docker import REMOVE_STALE_COMMAND
from node.config import NodeConfig
from testkit.macenv import own_files
from tests.maccli.conftest import FAKE_DOCKER as FAKE

CONFLICT = 'Conflict. The container name "/mac-...'


def _calls(state) -> list[str]:
    return (state / "calls.log").read_text().splitlines()


def test_doctor_finds_the_stale_containers_and_prints_the_removal_command(mac_env, docker):
    result = mac_env.run("doctor", "--json")
    assert result.returncode == 1
    checks = {c["id"]: c for c in json.loads(result.stdout)["checks"]}
    stale = checks["stale_containers"]
    assert stale["status"] == "fail"
    assert "mac-sys-exporter (project deploy)" in stale["detail"]
    # Exactly the foreign containers, by name (what `mac doctor --fix` runs).
    assert stale["fix"] == "docker rm -f mac-sys-exporter mac-nic-exporter"


@pytest.mark.django_db(transaction=True)
def test_start_agent_refuses_stale_containers_then_removes_them_on_request(
    mac_env, docker, live_master
):
    from inventory.models import Node

    mac_env.env.update(
        {
            "MASTER_IP": "127.0.0.1",
            "MAC_MASTER_PORT": str(live_master.port),
            "NODE_NAME": f"docker-{os.getpid()}",
            # The stand-in runs no container: nothing would answer a start that waited.
            "MAC_START_TIMEOUT": "0",
        }
    )
    refused = mac_env.run("start", "agent")
    assert refused.returncode == 1
    assert "Error: containers left by another Compose project hold MAC's names: " in refused.stderr
    assert "mac-sys-exporter (project deploy), mac-nic-exporter (project deploy)" in refused.stderr
    assert CONFLICT in refused.stderr
    # Those two by name; the guide's blanket form only as a note (none of MAC's own here).
    assert "  docker rm -f mac-sys-exporter mac-nic-exporter\n  mac start agent\n" in (
        refused.stderr
    )
    assert refused.stderr.endswith(f"  {REMOVE_STALE_COMMAND}\n")
    assert not any(call.startswith("compose") for call in _calls(docker))
    assert not Node.objects.exists()

    started = mac_env.run("start", "agent", "--remove-stale")
    assert started.returncode == 0, started.stderr
    assert "rm -f mac-sys-exporter mac-nic-exporter" in _calls(docker)
    up = [c for c in _calls(docker) if c.startswith("compose") and c.endswith("up -d --no-build")]
    assert len(up) == 1 and "-p mac -f " in up[0] and "docker-compose.agent.yml" in up[0]
    assert "--profile" not in up[0]  # no GPU here: no dcgm-exporter, no rocm-exporter
    assert started.stdout.strip().endswith("Registered with master 127.0.0.1.")
    containers = json.loads((docker / "containers.json").read_text())
    assert {c["project"] for c in containers} == {"mac"}
    assert "mac-dcgm-exporter" not in {c["name"] for c in containers}

    stopped = mac_env.run("stop", "agent")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads((docker / "containers.json").read_text()) == []
    assert not Node.objects.exists()


def test_a_conflict_from_compose_itself_gets_the_same_advice(docker, monkeypatch, tmp_path):
    # Nothing stale at check time, but `up` hits a leftover (created in between).
    from node.runner import run_command

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    runtime = DockerRuntime()
    original = runtime.run
    seen = {"ps": 0}

    def racing(argv, **options):
        if argv[:2] == ["docker", "ps"] and not seen["ps"]:
            seen["ps"] += 1
            return run_command(["true"])  # the check saw nothing
        return original(argv, **options)

    runtime.run = racing
    from maccli.output import CliError

    with pytest.raises(CliError) as caught:
        runtime.start("agent", [])
    assert caught.value.commands[0] == "docker rm -f mac-sys-exporter mac-nic-exporter"
    assert "already in use" in caught.value.hint


def test_auto_runtime_is_docker_when_the_engine_answers_else_process(docker, mac_env, monkeypatch):
    monkeypatch.setenv("PATH", mac_env.env["PATH"])
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    # A host that never had Docker's engine (no unit): test_docker_faults.py has the other.
    never = {f"MAC_{name}_ROOT": str(mac_env.root / "none") for name in ("ETC", "USR", "LIB")}
    cfg = NodeConfig.load(
        {**own_files(mac_env.root), **never, "MAC_STATE_DIR": str(mac_env.state_dir)}
    )
    assert isinstance(choose_runtime(cfg, "agent"), DockerRuntime)
    (docker / "engine-down").write_text("")
    assert isinstance(choose_runtime(cfg, "agent"), ProcessRuntime)
    # An explicit choice wins even where the engine is down.
    assert isinstance(choose_runtime(cfg, "agent", "docker"), DockerRuntime)


def test_an_engine_that_refuses_this_user_is_said_not_taken_for_no_engine(
    docker, mac_env, monkeypatch
):
    """Falling back to the process runtime listed every running container as a stopped
    service (`mac status` as a user outside the docker group, the guide's first step)."""
    from maccli.output import CliError

    monkeypatch.setenv("PATH", mac_env.env["PATH"])
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    cfg = NodeConfig.load({**own_files(mac_env.root), "MAC_STATE_DIR": str(mac_env.state_dir)})
    (docker / "engine-refuses").write_text("")

    with pytest.raises(CliError) as caught:
        choose_runtime(cfg, "agent")

    assert "may not use it" in caught.value.message
    assert caught.value.commands == ["sudo mac status", "sudo usermod -aG docker $USER"]
    refused = mac_env.run("status")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "sudo usermod -aG docker" in refused.stderr


def _without_plugin(docker, bin_dir, compose_v1: bool) -> None:
    """Like Debian's docker.io: no `docker compose`; `docker-compose` 1.29 when asked."""
    (docker / "no-compose-plugin").write_text("")
    if compose_v1:
        v1 = bin_dir / "docker-compose"
        v1.write_text(
            f'#!/bin/sh\nFAKE_COMPOSE_V1=1 exec "{sys.executable}" "{FAKE}" compose "$@"\n'
        )
        v1.chmod(0o755)


def test_it_uses_docker_compose_1_29_where_the_v2_plugin_is_missing(docker, monkeypatch, tmp_path):
    bin_dir = tmp_path / "bin"
    _without_plugin(docker, bin_dir, compose_v1=True)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    (docker / "containers.json").write_text("[]")
    runtime = DockerRuntime()
    runtime.start("agent", [])
    calls = _calls(docker)
    assert "compose version" in calls  # the plugin was tried first
    up = [c for c in calls if c.startswith("compose -p mac") and "up -d" in c]
    assert len(up) == 1, calls
    names = {c["name"] for c in json.loads((docker / "containers.json").read_text())}
    assert "mac-sys-exporter" in names and "mac-nic-exporter" in names


def test_it_names_the_package_to_install_when_no_compose_exists(docker, monkeypatch, tmp_path):
    from maccli.output import CliError

    _without_plugin(docker, tmp_path / "bin", compose_v1=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/nonexistent")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    (docker / "containers.json").write_text("[]")
    with pytest.raises(CliError) as caught:
        DockerRuntime().start("agent", [])
    assert "Docker Compose is missing" in caught.value.message
    assert caught.value.commands[0] == "sudo apt-get install docker-compose"


def test_status_shows_each_containers_state_as_docker_ps_does(mac_env, docker):
    rows = [
        {"id": "c1", "name": "mac-sys-exporter", "project": "mac", "service": "sys-exporter",
         "health": "healthy"},
        {"id": "c2", "name": "mac-bmc-agent", "project": "mac", "service": "bmc-agent",
         "health": "starting"},
        {"id": "c3", "name": "mac-sys-manager", "project": "mac", "service": "sys-manager",
         "health": "unhealthy"},
    ]  # fmt: skip
    (docker / "containers.json").write_text(json.dumps(rows))
    mac_env.env["MAC_RUNTIME"] = "docker"
    shown = mac_env.run("status")
    states = {
        line.split()[0]: " ".join(line.split()[1:4])
        for line in shown.stdout.splitlines()
        if line.split() and line.split()[0] in {"sys-exporter", "bmc-agent", "sys-manager"}
    }
    assert states["sys-exporter"].startswith("Up (healthy)"), shown.stdout
    assert states["bmc-agent"].startswith("Up (health: starting)"), shown.stdout
    assert states["sys-manager"].startswith("Up (unhealthy)"), shown.stdout
    nic = next(line for line in shown.stdout.splitlines() if line.startswith("nic-exporter "))
    assert nic.split()[1] == "stopped"  # no container: the runtime's own word
    assert shown.returncode == 1  # nothing answers on the liveness URLs here


class _AnswersOk(BaseHTTPRequestHandler):
    """Every liveness URL of the faked containers: `mac start` waits for them to answer."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args) -> None:
        pass


def test_start_master_gives_compose_the_public_url_the_process_runtime_derives(mac_env, docker):
    # Issue 25: under Docker MAC_PUBLIC_URL was empty, and notifications linked to
    # localhost; the servers' external URLs (/prometheus/, /alertmanager/) need it too.
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnswersOk)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = str(server.server_address[1])
    # The fake engine runs no container: one real server answers for all of them, so
    # start does not wait out each service's ready timeout.
    mac_env.env.update({name: port for name in PORT_SETTINGS})
    mac_env.env.update({"MAC_RUNTIME": "docker", "MAC_PUBLIC_HOST": "mac.example.test"})
    (docker / "containers.json").write_text("[]")  # no leftovers of another project

    try:
        started = mac_env.run("start", "master")
    finally:
        server.shutdown()
        server.server_close()

    assert started.returncode == 0, started.stdout + started.stderr
    seen = json.loads((docker / "compose-env.json").read_text())
    assert seen["MAC_PUBLIC_URL"] == f"https://mac.example.test:{port}"  # MAC_TLS_PORT
    assert f"Prometheus:  https://mac.example.test:{port}/prometheus/targets" in started.stdout
    assert f"Health:      curl http://mac.example.test:{port}/health" in started.stdout


def test_compose_always_gets_the_registered_node_name(monkeypatch, tmp_path):
    """In bridge mode a container's host name is its id: the exporters' Hostname label comes
    from ${NODE_NAME:-}, which must be the name the node registers under, set or not."""
    import socket

    from contract.services import AgentNetwork

    for name, value in own_files(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "GPU-12")
    runtime = DockerRuntime()
    runtime.network = AgentNetwork.BRIDGE
    assert runtime.compose_env("agent", [])["NODE_NAME"] == "gpu-12"
    # Set in the per-node file: that name, as the registration normalises it.
    (tmp_path / "mac_node_env_file").write_text("NODE_NAME=Rack3-GPU-07\n")
    assert runtime.compose_env("agent", [])["NODE_NAME"] == "rack3-gpu-07"
