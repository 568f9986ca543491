"""The agent's Python services as one supervised process, shown one row per service."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import psutil
import pytest

from contract.services import SERVICES, SYS_EXPORTER
from maccli.agent.bundled import BUNDLE_NAME, BundledRuntime
from maccli.agent.specs import ROLE, runtime_and_specs
from maccli.output import CliError
from maccli.runtimes.base import ServiceSpec, ServiceState
from maccli.runtimes.process import ProcessRuntime
from maccli.runtimes.supervisor import Supervisor
from node.config import ConfigError, NodeConfig
from testkit.ports import free_port
from testkit.processes import exited
from tests.exporters.conftest import FIXTURES, ROOT

PYTHON_SERVICES = [s.name for s in SERVICES if s.name != SYS_EXPORTER.name]


def _config(tmp_path, **extra: str) -> NodeConfig:
    env = {
        "HOME": str(tmp_path),
        "MAC_STATE_DIR": str(tmp_path / "state"),
        "MAC_USER_ENV_FILE": str(tmp_path / "user-env"),
        "MAC_NODE_ENV_FILE": str(tmp_path / "node-env"),
        "MAC_BIND": "127.0.0.1",
        "MAC_SYS_ROOT": str(FIXTURES / "sysfs-ib"),
        "MAC_PROC_ROOT": str(FIXTURES / "proc"),
        "MAC_SYSTEMD": "no",
        "MAC_AGENT_SERVICES": ",".join(PYTHON_SERVICES),
        **extra,
    }
    for name in PYTHON_SERVICES:
        env[f"MAC_{name.upper().replace('-', '_')}_PORT"] = str(free_port())
    return NodeConfig.load(env)


@pytest.fixture
def agent(tmp_path):
    started = []

    def make(**extra: str):
        runtime, specs = runtime_and_specs(_config(tmp_path, **extra), "process")
        started.append((runtime, specs))
        return runtime, specs

    yield make
    for runtime, specs in started:
        runtime.stop(ROLE, specs)
    for conf in tmp_path.glob("state/*/supervisor/supervisord.conf"):
        Supervisor(conf.parent.parent).shutdown()


def test_it_runs_the_python_services_as_one_process_with_a_row_each(agent):
    runtime, specs = agent()
    assert isinstance(runtime, BundledRuntime)
    assert [s.name for s in runtime.runtime_specs(specs)] == [BUNDLE_NAME]
    states = runtime.start(ROLE, specs)
    assert [s.name for s in states] == PYTHON_SERVICES
    assert {(s.state, s.health) for s in states} == {("running", "ok")}
    assert [s.port for s in states] == [s.port for s in specs]
    (pid,) = {s.pid for s in states}
    listening = {
        c.laddr.port
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {s.port for s in specs}
    # A second start finds it running and leaves it alone.
    assert {s.pid for s in runtime.start(ROLE, specs)} == {pid}
    stopped = runtime.stop(ROLE, specs)
    assert [s.name for s in stopped] == PYTHON_SERVICES
    assert not any(s.running for s in stopped)
    assert exited(pid)


def test_mac_logs_of_a_service_reads_the_shared_process_log(agent, tmp_path):
    runtime, specs = agent()
    runtime.start(ROLE, specs)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MAC_")},
        "HOME": str(tmp_path),
        "MAC_STATE_DIR": str(tmp_path / "state"),
        "MAC_USER_ENV_FILE": str(tmp_path / "user-env"),
        "MAC_NODE_ENV_FILE": str(tmp_path / "node-env"),
        "MAC_RUNTIME": "process",
        "PYTHONPATH": str(ROOT),
    }
    shown = subprocess.run(
        [sys.executable, "-m", "maccli.main", "logs", "bmc-agent", "-n", "50"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "bmc-agent listening on http://127.0.0.1:" in shown.stdout


def test_a_service_that_cannot_be_built_is_its_own_failing_row(agent, tmp_path, monkeypatch):
    broken = tmp_path / "broken" / "fastapi"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('fastapi is broken on this node')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(broken.parent), str(ROOT)]))
    runtime, specs = agent()
    states = {s.name: s for s in runtime.start(ROLE, specs)}
    assert states["mango-sdk-agent"].health == "HTTP 404"  # its /docs is not there
    assert all(s.health == "ok" for name, s in states.items() if name != "mango-sdk-agent")
    assert {s.state for s in states.values()} == {"running"}


def test_a_taken_member_port_is_named_before_anything_starts(agent):
    runtime, specs = agent()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", specs[-1].port))
    holder.listen()
    try:
        with pytest.raises(CliError) as caught:
            runtime.start(ROLE, specs)
    finally:
        holder.close()
    assert f"cannot start {specs[-1].name}: port {specs[-1].port} is already in use" in (
        caught.value.message
    )
    assert not any(s.running for s in runtime.status(ROLE, specs))


def test_mac_agent_bundle_0_runs_one_process_per_service(tmp_path):
    runtime, specs = runtime_and_specs(_config(tmp_path, MAC_AGENT_BUNDLE="0"), "process")
    assert isinstance(runtime, ProcessRuntime)
    assert [s.name for s in specs] == PYTHON_SERVICES
    assert all(s.argv[3:5] == [s.name, "--port"] for s in specs)


@pytest.mark.parametrize("bundle", ["1", "0"])
def test_the_gpu_exporters_keep_their_evidence_in_the_agents_state_folder(tmp_path, bundle):
    runtime, specs = runtime_and_specs(_config(tmp_path, MAC_AGENT_BUNDLE=bundle), "process")
    folder = str(tmp_path / "state" / ROLE / "gpu")
    folded = runtime.runtime_specs(specs) if isinstance(runtime, BundledRuntime) else specs
    commands = [spec.argv for spec in folded]
    assert len(commands) == (1 if bundle == "1" else len(PYTHON_SERVICES))
    for argv in commands:
        gpu = any(name.startswith(("dcgm-exporter", "rocm-exporter")) for name in argv)
        given = argv[argv.index("--state-dir") + 1] if "--state-dir" in argv else None
        assert given == (folder if gpu else None), argv


def test_a_wrong_mac_agent_bundle_names_the_setting(tmp_path):
    with pytest.raises(ConfigError) as caught:
        runtime_and_specs(_config(tmp_path, MAC_AGENT_BUNDLE="maybe"), "process")
    assert "MAC_AGENT_BUNDLE='maybe' is not on or off: use 1 or 0" in str(caught.value)


class _RunningBundle:
    """An inner runtime whose bundle process is up, its members not answering yet."""

    name = "process"

    def __init__(self, bundle):
        self.bundle = bundle

    def status(self, role, specs):
        return [ServiceState(spec.name, "running", pid=os.getpid()) for spec in specs]

    start = status


def test_start_timeout_0_does_not_wait_for_the_members(tmp_path):
    """MAC_START_TIMEOUT=0 (docs/settings.md): `mac start` does not wait for an answer."""
    silent = free_port()  # nothing listens here
    members = [
        ServiceSpec(name, [], port=silent, liveness_path="/health", ready_timeout=0)
        for name in PYTHON_SERVICES
    ]
    bundle = ServiceSpec(BUNDLE_NAME, [], port=silent, liveness_path="/", ready_timeout=0)
    runtime = BundledRuntime(_RunningBundle(bundle), bundle, members)
    # Raised "... did not answer within 0 s" before.
    states = runtime.start(ROLE, members)
    assert [s.name for s in states] == PYTHON_SERVICES
    assert {s.state for s in states} == {"running"}
    assert {s.health for s in states} == {"refused"}
