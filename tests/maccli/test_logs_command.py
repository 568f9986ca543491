"""`mac logs <service>`: real services under the process runtime, the stand-in docker otherwise.

Under the process runtime an agent's sw-exporter and the master's api-server (its real
command line from maccli/master/specs.py) run as `mac` runs them, so what `mac logs` prints
is what those processes wrote: the api-server's access log shows an agent's
registration, as the troubleshooting guide's `docker logs mac-api-server | grep` does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.maccli.conftest import loopback_address

FAKE = os.path.join(os.path.dirname(__file__), "fake_docker.py")


def _agent_env(mac_env, address: str = "127.0.0.1") -> None:
    mac_env.env.update(
        {
            "MAC_BIND": address,
            # A Python exporter (sys-exporter is node_exporter, with a prestart of its own).
            "MAC_AGENT_SERVICES": "sw-exporter",
            "MAC_SW_EXPORTER_PORT": str(free_port(address)),
            "MAC_START_TIMEOUT": "30",
            "MAC_STOP_GRACE": "5",
        }
    )


@pytest.mark.django_db(transaction=True)
def test_logs_show_a_service_and_the_api_servers_registrations(mac_env):
    from maccli.master.specs import master_specs
    from maccli.runtimes.process import ProcessRuntime
    from node.config import NodeConfig
    from tests.conftest import live_database_url

    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("the api-server runs on the test PostgreSQL database: set DATABASE_URL")
    api_port, address = free_port(), loopback_address(7)
    mac_env.env.update(
        {
            "MAC_DATA_DIR": str(mac_env.root / "data"),
            "MAC_MASTER_PORT": str(api_port),
            "MAC_MASTER_BIND": "127.0.0.1",
            "MAC_API_WORKERS": "1",
        }
    )
    # The api-server and its proxy exactly as `mac start master` runs them, on the test
    # database; its set-up commands (migrate, collectstatic) are already done for it.
    specs = master_specs(NodeConfig.load(mac_env.env))
    [api] = [s for s in specs if s.name == "api-server"]
    [proxy] = [s for s in specs if s.name == "proxy"]
    api.prestart = []
    api.env.update(
        {
            "DATABASE_URL": live_database_url(),
            "MAC_PROBE_INTERVAL": "3600",
            "MAC_REGISTER_RATE": "100000/min",
            "MAC_JOIN_TOKEN": "",
        }
    )
    master = ProcessRuntime(mac_env.state_dir, grace=5)
    _agent_env(mac_env, address)
    mac_env.env.update(
        {
            "MASTER_IP": "127.0.0.1",
            "NODE_NAME": f"logs-{address.replace('.', '-')}",
            "MAC_AGENT_IP": address,
        }
    )
    try:
        master.start("master", [api, proxy])
        started = mac_env.run("start", "agent")
        assert started.returncode == 0, started.stdout + started.stderr

        shown = mac_env.run("logs", "sw-exporter")
        assert shown.returncode == 0, shown.stderr
        log = mac_env.state_dir / "agent" / "logs" / "sw-exporter.log"
        assert shown.stdout == log.read_text()
        assert "-m exporters sw-exporter --port" in shown.stdout  # the runtime's start line

        last = mac_env.run("logs", "sw-exporter", "-n", "1")
        assert last.returncode == 0
        assert last.stdout == log.read_text().splitlines(keepends=True)[-1]

        # The master's side of the guide's check: the registration is in the access log,
        # with the agent's own address (the proxy's X-Forwarded-For, believed from it).
        access = mac_env.run("logs", "api-server")
        assert access.returncode == 0, access.stderr
        registrations = [line for line in access.stdout.splitlines() if "/api/v1/register" in line]
        assert registrations, access.stdout[-2000:]
        # "<address> - ...": no port 0 after it (uvicorn's for a forwarded client).
        assert registrations[-1].startswith(f'{address} - "POST /api/v1/register'), registrations
        assert "Traceback" not in access.stderr + shown.stderr + last.stderr
    finally:
        mac_env.run("stop", "agent")
        master.stop("master", [api, proxy])


def test_follow_prints_new_lines_until_ctrl_c(mac_env):
    _agent_env(mac_env)
    first = mac_env.run("restart", "agent")  # starts sw-exporter, no master needed
    assert first.returncode == 0, first.stdout + first.stderr
    log_path = mac_env.state_dir / "agent" / "logs" / "sw-exporter.log"
    follower = subprocess.Popen(
        [sys.executable, "-m", "maccli.main", "logs", "sw-exporter", "-n", "0", "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=mac_env.env,
    )
    try:
        # The follower has the file open (its empty tail printed, polling), however long
        # its start took on a busy machine.
        wait_for(
            lambda: str(log_path) in {f.path for f in psutil.Process(follower.pid).open_files()},
            timeout=30,
            what="mac logs -f reading the log",
        )
        again = mac_env.run("restart", "agent")  # the runtime appends a new start line
        assert again.returncode == 0, again.stderr
        time.sleep(1)
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=30)
        log = log_path.read_text()
    finally:
        if follower.poll() is None:
            follower.kill()
        mac_env.run("stop", "agent")
    assert follower.returncode == 0, err
    assert b"Traceback" not in err
    # Only what the restart appended (-n 0): the old service's last words, the new start.
    starts = [line for line in out.decode().splitlines() if line.startswith("==> ")]
    assert log.count("\n==> ") == 2 and len(starts) == 1, out.decode()
    assert "-m exporters sw-exporter" in starts[0]
    assert log.endswith(out.decode())


def test_unknown_service_never_ran_and_a_closed_pipe(mac_env):
    unknown = mac_env.run("logs", "sys-exproter")
    assert unknown.returncode == 2
    assert "unknown service 'sys-exproter'" in unknown.stderr
    assert "sys-exporter, bmc-agent" in unknown.stderr and "api-server, worker" in unknown.stderr

    wrong = mac_env.run("logs", "api-server", "--role", "agent")
    assert wrong.returncode == 2
    assert "api-server is a master service, not an agent one." in wrong.stderr

    never = mac_env.run("logs", "mac-bmc-agent")  # the container's name works too
    assert never.returncode == 1
    assert "bmc-agent has not run under the process runtime here" in never.stderr
    assert "mac start agent" in never.stderr

    # Under the process runtime the master's Redis is the host's: where its log is.
    redis = mac_env.run("logs", "redis")
    assert redis.returncode == 1
    assert "redis is not run by mac under the process runtime" in redis.stderr
    assert "journalctl -u redis-server" in redis.stderr

    bad = mac_env.run("logs", "worker", "-n", "-3")
    assert bad.returncode == 2 and "not a number of lines" in bad.stderr

    # A reader that stops early (| head) ends `mac logs` quietly.
    log = mac_env.state_dir / "master" / "logs" / "worker.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"worker line {n}\n" for n in range(200_000)))
    mac = subprocess.Popen(
        [sys.executable, "-m", "maccli.main", "logs", "worker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=mac_env.env,
    )
    head = subprocess.run(
        ["head", "-n", "2"], stdin=mac.stdout, capture_output=True, text=True, check=False
    )
    mac.stdout.close()
    assert mac.wait(30) == 0
    assert head.stdout == "worker line 0\nworker line 1\n"
    assert mac.stderr.read() == b""
    tail = mac_env.run("logs", "worker", "--lines", "2")
    assert tail.stdout == "worker line 199998\nworker line 199999\n"
    assert mac_env.run("logs", "worker", "-n", "0").stdout == ""


@pytest.fixture
def docker(mac_env, tmp_path):
    """The stand-in docker first on PATH, with two containers of project mac."""
    bin_dir, state = tmp_path / "bin", tmp_path / "docker-state"
    bin_dir.mkdir()
    state.mkdir()
    wrapper = bin_dir / "docker"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    wrapper.chmod(0o755)
    rows = [
        {"id": "c1", "name": "mac-sys-exporter", "project": "mac", "service": "sys-exporter"},
        {"id": "c2", "name": "mac-api-server", "project": "mac", "service": "api-server"},
        {"id": "c3", "name": "mac-redis", "project": "mac", "service": "redis"},
        {"id": "c4", "name": "mac-prometheus", "project": "mac", "service": "prometheus"},
    ]
    (state / "containers.json").write_text(json.dumps(rows))
    mac_env.env.update(
        {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "FAKE_DOCKER_STATE": str(state),
            "MAC_RUNTIME": "docker",
        }
    )
    return state


def test_docker_logs_pass_through_with_tail_and_follow(mac_env, docker):
    shown = mac_env.run("logs", "sys-exporter", "-n", "2", "-f")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "mac-sys-exporter stdout line 2\nmac-sys-exporter stdout line 3\n"
    assert shown.stderr == "mac-sys-exporter stderr line\n"

    api = mac_env.run("logs", "api-server")
    assert api.returncode == 0
    assert api.stdout.splitlines()[0] == "mac-api-server stdout line 1"
    # The Docker master's own Redis and Prometheus, by service or container name.
    redis = mac_env.run("logs", "redis", "-n", "1")
    assert redis.returncode == 0, redis.stderr
    assert redis.stdout == "mac-redis stdout line 3\n"
    prometheus = mac_env.run("logs", "mac-prometheus")
    assert prometheus.returncode == 0, prometheus.stderr
    assert prometheus.stdout.splitlines()[0] == "mac-prometheus stdout line 1"
    calls = (docker / "calls.log").read_text().splitlines()
    assert calls == [
        "logs --tail 2 -f mac-sys-exporter",
        "logs mac-api-server",
        "logs --tail 1 mac-redis",
        "logs mac-prometheus",
    ]

    missing = mac_env.run("logs", "bmc-agent")
    assert missing.returncode == 1
    assert "there is no container mac-bmc-agent" in missing.stderr
    assert "bmc-agent has not run under the docker runtime here" in missing.stderr
    assert "mac start agent" in missing.stderr
    assert "Error response from daemon" not in missing.stderr

    (docker / "engine-down").touch()
    down = mac_env.run("logs", "api-server")
    assert down.returncode == 1
    assert "the Docker engine does not answer: Cannot connect" in down.stderr
    assert "sudo systemctl enable --now docker" in down.stderr
    assert "Traceback" not in shown.stderr + api.stderr + missing.stderr + down.stderr
