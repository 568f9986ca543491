"""The docker runtime when something is missing: the engine, a service's answer, a GPU's
plumbing. Each case says what is wrong and the next command, and never passes for success.

Docker here is the stand-in of tests/maccli/fake_docker.py (the `docker` fixture): a
container table, the engine's own messages, a file that takes the engine down.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from maccli.output import CliError
from maccli.runtimes.base import ServiceSpec
from maccli.runtimes.docker import DockerRuntime
from maccli.runtimes.process import ProcessRuntime
from maccli.runtimes.select import choose_runtime
from node.checks.docker import REMOVE_STALE_COMMAND
from node.config import NodeConfig
from testkit.fakehttp import JsonHandler, serving
from testkit.macenv import own_files
from testkit.ports import free_port

ENGINE_DOWN = "Error: the Docker engine does not answer: Cannot connect to the Docker daemon"
UNIT = "systemd/system/docker.service"


def _calls(state: Path) -> list[str]:
    return (state / "calls.log").read_text().splitlines()


def _ups(state: Path) -> list[str]:
    return [c for c in _calls(state) if c.startswith("compose") and " up -d" in c]


def _names(state: Path) -> set[str]:
    return {row["name"] for row in json.loads((state / "containers.json").read_text())}


def _roots(mac_env, *, docker_unit: bool) -> dict[str, str]:
    """/etc, /usr and /lib of a host of the test's own, with Docker's unit or without."""
    roots = {}
    for name in ("etc", "usr", "lib"):
        folder = mac_env.root / "host" / name
        folder.mkdir(parents=True, exist_ok=True)
        roots[f"MAC_{name.upper()}_ROOT"] = str(folder)
    if docker_unit:
        unit = mac_env.root / "host" / "lib" / UNIT
        unit.parent.mkdir(parents=True)
        unit.write_text("[Service]\nExecStart=/usr/sbin/dockerd\n")
    return roots


@pytest.fixture
def here(docker, mac_env, monkeypatch):
    """The stand-in engine for a runtime made in this process, on a host of the test's own:
    no GPU, no NVIDIA toolkit on PATH (only the stand-in's bin), no leftovers."""
    (docker / "containers.json").write_text("[]")
    for name, value in own_files(mac_env.root).items():
        monkeypatch.setenv(name, value)
    host = mac_env.root / "host"
    for name in ("sys", "proc", "dev"):
        (host / name).mkdir(parents=True)
        monkeypatch.setenv(f"MAC_{name.upper()}_ROOT", str(host / name))
    monkeypatch.setenv("PATH", str(mac_env.root / "bin"))
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    return host


# H1: an installed engine that does not answer is not "no Docker" ---------------------------


def test_auto_says_the_engine_is_down_where_docker_is_installed(docker, mac_env, monkeypatch):
    monkeypatch.setenv("PATH", mac_env.env["PATH"])
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    (docker / "engine-down").write_text("")
    roots = _roots(mac_env, docker_unit=True)
    cfg = NodeConfig.load({**own_files(mac_env.root), **roots, "MAC_STATE_DIR": "/nonexistent"})

    with pytest.raises(CliError) as caught:
        choose_runtime(cfg, "agent")

    assert caught.value.message.startswith("the Docker engine does not answer: Cannot connect")
    assert caught.value.commands == ["sudo systemctl enable --now docker"]
    assert caught.value.rerun  # main() adds the command that ran

    mac_env.env.update(roots)
    for command in (("status",), ("restart", "agent"), ("stop", "agent"), ("status", "master")):
        shown = mac_env.run(*command, extra={"MASTER_IP": "127.0.0.1"})
        assert shown.returncode == 1, shown.stdout
        assert shown.stderr.startswith(ENGINE_DOWN), shown.stderr
        # The guide's cure, then the very command again; no "process runtime" table.
        assert f"  sudo systemctl enable --now docker\n  mac {' '.join(command)}\n" in (
            shown.stderr
        )
        assert "process runtime" not in shown.stdout + shown.stderr
    assert not mac_env.state_dir.exists(), "no process agent was started beside the containers"


def test_auto_keeps_the_process_runtime_where_docker_never_was(docker, mac_env, monkeypatch):
    monkeypatch.setenv("PATH", mac_env.env["PATH"])
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    (docker / "engine-down").write_text("")
    roots = _roots(mac_env, docker_unit=False)
    cfg = NodeConfig.load({**own_files(mac_env.root), **roots, "MAC_STATE_DIR": "/nonexistent"})

    assert isinstance(choose_runtime(cfg, "agent"), ProcessRuntime)


def test_status_under_docker_with_a_silent_engine_is_an_error_not_stopped(mac_env, docker):
    mac_env.env["MAC_RUNTIME"] = "docker"
    (docker / "engine-down").write_text("")

    for role in ("agent", "master"):
        shown = mac_env.run("status", role)
        assert shown.returncode == 1
        assert shown.stderr.startswith(ENGINE_DOWN), shown.stderr
        assert f"  mac status {role}\n" in shown.stderr
        assert "stopped" not in shown.stdout


def test_the_containers_of_a_silent_engine_are_an_error(here, docker):
    (docker / "engine-down").write_text("")
    with pytest.raises(CliError) as caught:
        DockerRuntime().status("agent", [ServiceSpec("sys-exporter", [], port=29101)])
    assert "does not answer" in caught.value.message


# H5: `mac start` under Docker says ok only when the services answer -------------------------


def _spec(name: str, port: int, timeout: float = 1.0) -> ServiceSpec:
    return ServiceSpec(name, [], port=port, liveness_path="/metrics", ready_timeout=timeout)


class _Ok(JsonHandler):
    """A master's /health, and an exporter's /metrics (a Prometheus exposition)."""

    def do_GET(self):
        self.send_json(200, b"# TYPE up gauge\nup 1\n" if "metrics" in self.path else {})


def test_start_fails_naming_each_service_that_does_not_answer(here, docker):
    silent = free_port()
    with serving(_Ok) as url:
        answering = int(url.rsplit(":", 1)[1])
        specs = [
            _spec("sys-exporter", silent),
            _spec("nic-exporter", answering),
            _spec("sw-exporter", silent),
            _spec("bmc-agent", silent, timeout=0),  # MAC_START_TIMEOUT=0: not waited for
        ]
        for start in (DockerRuntime().start, DockerRuntime().restart):
            with pytest.raises(CliError) as caught:
                start("agent", specs)
            error = caught.value
            assert error.message == (
                f"sys-exporter does not answer http://127.0.0.1:{silent}/metrics after 1 s: "
                f"refused; sw-exporter does not answer http://127.0.0.1:{silent}/metrics "
                "after 1 s: refused."
            )
            assert error.commands == [
                "docker logs mac-sys-exporter --tail 50",
                "docker logs mac-sw-exporter --tail 50",
                "mac status agent",
            ]


def test_start_agent_does_not_register_when_nothing_answers(mac_env, docker):
    (docker / "containers.json").write_text("[]")
    with serving(_Ok) as url:
        mac_env.env.update(
            {
                "MAC_RUNTIME": "docker",
                "MASTER_IP": "127.0.0.1",
                "MAC_MASTER_PORT": url.rsplit(":", 1)[1],
                "MAC_START_TIMEOUT": "1",
                "MAC_PORT_OFFSET": str(free_port() - 29101),
                "NODE_NAME": "silent-node",
            }
        )
        started = mac_env.run("start", "agent")

    assert started.returncode == 1, started.stdout + started.stderr
    assert "Error: sys-exporter does not answer" in started.stderr
    assert "  docker logs mac-sys-exporter --tail 50\n" in started.stderr
    assert "Registered" not in started.stdout


# M1, seed #4 and #5: a GPU profile without its plumbing is left out, the rest starts ------


def _nvidia_gpu(host: Path) -> None:
    (host / "dev" / "nvidia0").write_text("")


def test_an_nvidia_node_without_the_toolkit_starts_without_dcgm_exporter(here, docker, capsys):
    _nvidia_gpu(here)
    dcgm = _spec("dcgm-exporter", free_port())  # never answers: it is not waited for

    DockerRuntime(profiles=["nvidia"]).start("agent", [dcgm])

    (up,) = _ups(docker)
    assert "--profile nvidia" not in up
    assert "mac-sys-exporter" in _names(docker) and "mac-dcgm-exporter" not in _names(docker)
    said = capsys.readouterr().err
    assert "Warning: dcgm-exporter left out: 1 NVIDIA GPU(s) but none of nvidia-ctk" in said
    # The guide's steps, as `mac doctor` gives them, then the guide's restart.
    steps = [
        "sudo apt install nvidia-container-toolkit",
        "sudo nvidia-ctk runtime configure --runtime=docker",
        "sudo systemctl restart docker",
        "mac restart agent",
    ]
    assert "\n".join(f"  {step}" for step in steps) in said


def test_an_nvidia_runtime_in_the_engine_keeps_dcgm_exporter(here, docker, capsys):
    _nvidia_gpu(here)
    (docker / "runtimes.json").write_text('{"nvidia": {"path": "nvidia-container-runtime"}}')

    DockerRuntime(profiles=["nvidia"]).start("agent", [])

    assert "--profile nvidia" in _ups(docker)[0]
    assert "mac-dcgm-exporter" in _names(docker)
    assert "left out" not in capsys.readouterr().err


def test_a_toolkit_the_engine_does_not_use_yet_is_left_out_when_docker_refuses(
    here, docker, capsys
):
    _nvidia_gpu(here)
    ctk = Path(os.environ["PATH"]) / "nvidia-ctk"
    ctk.write_text("#!/bin/sh\nexit 0\n")
    ctk.chmod(0o755)
    (docker / "no-nvidia-driver").write_text("")

    DockerRuntime(profiles=["nvidia"]).start("agent", [])

    first, second = _ups(docker)
    assert "--profile nvidia" in first and "--profile nvidia" not in second
    assert "mac-sys-exporter" in _names(docker)
    said = capsys.readouterr().err
    assert (
        "Warning: dcgm-exporter left out: Docker refused its GPUs (Error response from daemon: "
        'could not select device driver "nvidia"'
    ) in said
    assert "  sudo nvidia-ctk runtime configure --runtime=docker\n" in said
    assert "  sudo systemctl restart docker\n  mac restart agent" in said


def test_an_amd_node_without_its_devices_starts_without_rocm_exporter(here, docker, capsys):
    (here / "dev" / "dri").mkdir()  # /dev/kfd missing: amdgpu not loaded

    for start in (DockerRuntime(profiles=["amd"]).start, DockerRuntime(profiles=["amd"]).restart):
        start("agent", [_spec("rocm-exporter", free_port())])

        assert "--profile amd" not in _ups(docker)[-1]
        assert "mac-sys-exporter" in _names(docker) and "mac-rocm-exporter" not in _names(docker)
        said = capsys.readouterr().err
        assert f"Warning: rocm-exporter left out: it needs {here}/dev/kfd and " in said
        assert f"{here}/dev/kfd is missing here: the amdgpu driver is not loaded." in said
        assert "  sudo modprobe amdgpu\n" in said and "  mac restart agent" in said


@pytest.mark.django_db(transaction=True)
def test_an_nvidia_node_without_the_toolkit_registers(mac_env, docker, live_master):
    from inventory.models import Node

    (docker / "containers.json").write_text("[]")
    dev = mac_env.root / "dev"
    dev.mkdir()
    (dev / "nvidia0").write_text("")
    name = f"gpu-{os.getpid()}"
    mac_env.env.update(
        {
            "MASTER_IP": "127.0.0.1",
            "MAC_MASTER_PORT": str(live_master.port),
            "NODE_NAME": name,
            "MAC_RUNTIME": "docker",
            "MAC_START_TIMEOUT": "0",
            "MAC_DEV_ROOT": str(dev),
            "MAC_SYS_ROOT": str(mac_env.root / "sys"),
            "PATH": str(mac_env.root / "bin"),
        }
    )

    started = mac_env.run("start", "agent")

    assert started.returncode == 0, started.stdout + started.stderr
    assert "Warning: dcgm-exporter left out" in started.stderr
    assert started.stdout.strip().endswith("Registered with master 127.0.0.1.")
    assert Node.objects.get(hostname=name).gpu_vendor == "nvidia"


# M2: stop with the engine down -----------------------------------------------------------


def test_stop_with_the_engine_down_says_so_without_compose_s_traceback(mac_env, docker):
    mac_env.env.update({"MAC_RUNTIME": "docker", "MASTER_IP": "127.0.0.1"})
    (docker / "engine-down").write_text("")

    for role in ("agent", "master"):
        stopped = mac_env.run("stop", role)
        assert stopped.returncode == 1
        assert stopped.stderr.startswith(ENGINE_DOWN), stopped.stderr
        assert f"  sudo systemctl enable --now docker\n  mac stop {role}\n" in stopped.stderr
        assert not any(c.startswith("compose") and " down" in c for c in _calls(docker))


TRACEBACK = """Traceback (most recent call last):
  File "urllib3/connectionpool.py", line 670, in urlopen
    httplib_response = self._make_request(
ConnectionRefusedError: [Errno 111] Connection refused
docker.errors.DockerException: Error while fetching server API version: Connection refused
"""


def test_a_failed_down_says_compose_s_error_not_its_traceback(here, docker):
    from node.runner import CommandResult

    runtime = DockerRuntime()
    answering = runtime.run

    def down_fails(argv, **options):
        if "down" in argv:
            return CommandResult(1, "", TRACEBACK)
        return answering(argv, **options)

    runtime.run = down_fails
    with pytest.raises(CliError) as caught:
        runtime.stop("agent", [])
    assert caught.value.message == (
        "docker compose down failed: docker.errors.DockerException: Error while fetching "
        "server API version: Connection refused"
    )


# L7, seed #9: the stale containers' cure removes those, not MAC's own ----------------------


def test_the_stale_cure_names_the_foreign_containers_and_spares_mac_s_own(here, docker):
    foreign = [
        {"id": "a1", "name": "mac-sys-exporter", "project": "deploy", "service": "x"},
        {"id": "a2", "name": "mac-nic-exporter", "project": "deploy", "service": "y"},
    ]
    (docker / "containers.json").write_text(json.dumps(foreign))
    with pytest.raises(CliError) as caught:
        DockerRuntime().start("agent", [])
    assert caught.value.commands == [
        "docker rm -f mac-sys-exporter mac-nic-exporter",
        "mac start agent",
        "# the guide's form does the same here (it removes every mac-* container, and none "
        "is MAC's own yet):",
        REMOVE_STALE_COMMAND,
    ]

    # A master of MAC's own beside them: the guide's form would remove it too.
    master = {"id": "m1", "name": "mac-api-server", "project": "mac", "service": "api-server"}
    (docker / "containers.json").write_text(json.dumps([*foreign, master]))
    with pytest.raises(CliError) as caught:
        DockerRuntime().start("agent", [])
    assert caught.value.commands == [
        "docker rm -f mac-sys-exporter mac-nic-exporter",
        "mac start agent",
    ]
    assert REMOVE_STALE_COMMAND not in "\n".join(caught.value.commands)
