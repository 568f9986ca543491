"""The boot-time unit `mac` installs where the host runs systemd, and its removal.

The unit files go to a temporary unit directory (MAC_SYSTEMD_UNIT_DIR), never to the
real /etc/systemd/system; `systemd-analyze verify` checks them where it is installed.
This machine does not boot with systemd, so `systemctl` is played by a small stand-in
that does what systemd would with the unit: run its ExecStart (supervisord in the
foreground) on `enable --now`, and stop it on `disable --now`.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys

import pytest

from maccli.runtimes import dockerfence
from maccli.runtimes.base import ServiceSpec
from maccli.runtimes.docker import DockerRuntime
from maccli.runtimes.process import ProcessRuntime
from maccli.systemd import (
    ISOLATION_UNIT,
    SystemdUnits,
    render_isolation_unit,
    render_unit,
    systemd_units,
    unit_name,
)
from node.config import NodeConfig
from node.runner import CommandResult
from testkit.ports import free_port


def _unit_text(tmp_path, role="agent") -> str:
    command = [sys.executable, "-m", "supervisor.supervisord", "-c", str(tmp_path / "s.conf"), "-n"]
    return render_unit(role, command, tmp_path, stop_grace=10)


def test_it_renders_a_unit_that_restarts_supervisord_and_starts_at_boot(tmp_path):
    text = _unit_text(tmp_path, "master")
    lines = text.splitlines()
    assert (
        f"ExecStart={sys.executable} -m supervisor.supervisord -c {tmp_path / 's.conf'} -n" in lines
    )
    assert "Restart=always" in lines
    assert "KillMode=mixed" in lines
    assert "WantedBy=multi-user.target" in lines
    assert "After=network.target redis-server.service postgresql.service" in lines
    assert f"WorkingDirectory={tmp_path}" in lines
    assert "After=network.target" in _unit_text(tmp_path, "agent").splitlines()
    assert not any("network-online" in line for line in lines)  # see maccli.systemd


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is absent")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    (tmp_path / "s.conf").write_text("")
    path = tmp_path / unit_name("agent")
    path.write_text(_unit_text(tmp_path))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, check=False
    )
    problems = [
        line for line in (done.stderr + done.stdout).splitlines()
        # Where systemd does not run, verify also reports the host's missing manager
        # and unrelated system units; only lines about our unit matter.
        if unit_name("agent") in line
    ]  # fmt: skip
    assert done.returncode == 0 or not problems, done.stderr
    assert not problems, problems


def test_a_path_with_spaces_and_percent_is_quoted_for_systemd(tmp_path):
    odd = tmp_path / "my state" / "50%"
    text = render_unit("agent", [sys.executable, "-c", str(odd / "x.conf")], odd, 5)
    [exec_start] = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert f'"{odd}/x.conf"'.replace("%", "%%") in exec_start


def test_mac_systemd_no_and_hosts_without_systemd_use_plain_supervisord(tmp_path):
    assert systemd_units({"MAC_SYSTEMD": "no"}.get) is None
    units = systemd_units({"MAC_SYSTEMD": "yes", "MAC_SYSTEMD_UNIT_DIR": str(tmp_path)}.get)
    assert units is not None and units.unit_dir == tmp_path
    from maccli.output import CliError

    with pytest.raises(CliError) as caught:
        systemd_units({"MAC_SYSTEMD": "maybe"}.get)
    assert "MAC_SYSTEMD='maybe'" in caught.value.message


class StandInSystemctl:
    """What systemd does with our unit, for a host that does not run systemd."""

    def __init__(self, unit_dir) -> None:
        self.unit_dir = unit_dir
        self.calls: list[list[str]] = []
        self.running: dict[str, subprocess.Popen] = {}

    def __call__(self, argv):
        self.calls.append(list(argv))
        verb, *rest = argv[1:]
        if verb == "enable" and rest[0] == "--now":
            unit = (self.unit_dir / rest[1]).read_text()
            [line] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
            command = shlex.split(line.removeprefix("ExecStart=").replace("%%", "%"))
            self.running[rest[1]] = subprocess.Popen(command, start_new_session=True)
        elif verb == "disable" and rest[0] == "--now":
            process = self.running.pop(rest[1])
            process.send_signal(signal.SIGTERM)
            process.wait(30)
        return CommandResult(0, "", "")


SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _server_spec(tmp_path) -> ServiceSpec:
    """A service that answers /health on a free port, as supervisord runs one."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    return ServiceSpec(
        "svc", [sys.executable, str(script), str(port)], port=port, liveness_path="/health"
    )


def test_start_installs_and_enables_the_unit_and_stop_removes_it(tmp_path):
    units_dir = tmp_path / "units"
    systemctl = StandInSystemctl(units_dir)
    runtime = ProcessRuntime(
        tmp_path / "state", grace=5, systemd=SystemdUnits(units_dir, run=systemctl)
    )
    spec = _server_spec(tmp_path)
    try:
        [state] = runtime.start("agent", [spec])
        assert state.running and state.health == "ok"
        unit = units_dir / "mac-agent.service"
        assert unit.exists()
        assert ["systemctl", "daemon-reload"] in systemctl.calls
        assert ["systemctl", "enable", "--now", "mac-agent.service"] in systemctl.calls
        assert f"-c {runtime.supervisor('agent').conf} -n" in unit.read_text()

        [stopped] = runtime.stop("agent", [spec])
        assert stopped.state == "stopped"
        assert not unit.exists()
        assert ["systemctl", "disable", "--now", "mac-agent.service"] in systemctl.calls
        assert not systemctl.running
    finally:
        for process in systemctl.running.values():
            process.kill()


def _isolation_text() -> str:
    command = dockerfence.boot_command("mac_master")
    return render_isolation_unit(command, {"DOCKER_HOST": "unix:///run/my docker.sock"})


def test_the_isolation_unit_runs_once_after_docker_at_each_boot():
    lines = _isolation_text().splitlines()
    assert "After=docker.service" in lines and "Requires=docker.service" in lines
    assert "Type=oneshot" in lines and "RemainAfterExit=yes" in lines
    assert f"ExecStart={sys.executable} -m maccli.runtimes.dockerfence install mac_master" in lines
    assert 'Environment="DOCKER_HOST=unix:///run/my docker.sock"' in lines
    # At boot, and whenever Docker starts later (socket activation).
    assert "WantedBy=multi-user.target docker.service" in lines


def test_a_dollar_in_a_path_is_not_a_variable_for_systemd():
    text = render_isolation_unit(["/opt/mac$1/bin/python", "-m", "x"], {})
    assert "ExecStart=/opt/mac$$1/bin/python -m x" in text.splitlines()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is absent")
def test_systemd_analyze_verify_accepts_the_isolation_unit(tmp_path):
    path = tmp_path / ISOLATION_UNIT
    path.write_text(_isolation_text())
    done = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, check=False
    )
    problems = [line for line in (done.stderr + done.stdout).splitlines() if ISOLATION_UNIT in line]
    assert not problems, problems


class _Engine:
    """The docker and iptables answers a master's start and stop get (nothing runs)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv, env=None):
        self.calls.append(list(argv))
        if argv[:3] == ["docker", "network", "inspect"]:
            return CommandResult(0, json.dumps([{"Id": "0123456789abcdef", "Options": {}}]))
        if argv[0].startswith("iptables") and "-S" in argv:
            return CommandResult(0, "-N DOCKER-USER\n")
        if argv[0].startswith("iptables") and "--version" in argv:
            return CommandResult(0, f"{argv[0]} v1.8.9 (nf_tables)\n")
        return CommandResult(0, "", "")


def test_a_docker_master_enables_the_isolation_unit_and_its_stop_removes_it(tmp_path, capsys):
    units_dir = tmp_path / "units"
    systemctl = _Engine()  # what the command does is tests/docker/test_front_door.py's
    runtime = DockerRuntime(tmp_path, run=_Engine(), systemd=SystemdUnits(units_dir, run=systemctl))
    runtime._isolate("master")
    unit = units_dir / ISOLATION_UNIT
    assert "dockerfence install mac_master" in unit.read_text()
    assert ["systemctl", "enable", "--now", ISOLATION_UNIT] in systemctl.calls
    assert f"At boot:     {ISOLATION_UNIT} puts the rules back" in capsys.readouterr().out

    runtime.stop("master", [])
    assert not unit.exists()
    assert ["systemctl", "disable", "--now", ISOLATION_UNIT] in systemctl.calls


def test_without_systemd_a_docker_master_says_to_start_it_after_each_boot(tmp_path, capsys):
    DockerRuntime(tmp_path, run=_Engine())._isolate("master")
    said = capsys.readouterr()
    assert "run `mac start master` after each boot" in said.out + said.err


def test_with_mac_systemd_no_a_unit_left_by_an_earlier_start_is_named(tmp_path, capsys):
    from maccli.runtimes.select import choose_runtime
    from testkit.macenv import scratch_mac_env

    units_dir = tmp_path / "units"
    units_dir.mkdir()
    left = units_dir / ISOLATION_UNIT
    left.write_text("[Unit]\n")
    env = scratch_mac_env(tmp_path, MAC_SYSTEMD="no", MAC_SYSTEMD_UNIT_DIR=str(units_dir))
    runtime = choose_runtime(NodeConfig.load(environ=env), "master", "docker", run=_Engine())
    assert runtime.systemd is None and runtime.left_unit == left
    runtime._isolate("master")
    said = capsys.readouterr()
    words = said.out + said.err
    assert f"{ISOLATION_UNIT}, installed by an earlier start, stays enabled" in words
    assert f"sudo systemctl disable {ISOLATION_UNIT} && sudo rm {left}" in words
    assert "after each boot" not in words  # the unit does put them back
    assert left.exists()  # mac leaves systemd alone, as MAC_SYSTEMD=no asks


def test_a_master_stop_whose_unit_systemd_will_not_remove_still_stops(tmp_path, capsys):
    units_dir = tmp_path / "units"
    units_dir.mkdir()
    (units_dir / ISOLATION_UNIT).write_text("[Unit]\n")

    def refusing(argv):
        return CommandResult(1, "", "Failed to disable unit: Access denied\n")

    runtime = DockerRuntime(tmp_path, run=_Engine(), systemd=SystemdUnits(units_dir, run=refusing))
    runtime.stop("master", [])
    said = capsys.readouterr()
    assert f"{ISOLATION_UNIT} not removed: systemctl disable --now" in said.out + said.err


def test_a_master_moved_to_processes_takes_its_docker_boot_unit_away(tmp_path):
    units_dir = tmp_path / "units"
    units_dir.mkdir()
    (units_dir / ISOLATION_UNIT).write_text(_isolation_text())  # left by a Docker master
    systemctl = StandInSystemctl(units_dir)
    runtime = ProcessRuntime(
        tmp_path / "state", grace=5, systemd=SystemdUnits(units_dir, run=systemctl)
    )
    systemctl.running[ISOLATION_UNIT] = subprocess.Popen(["sleep", "60"])  # RemainAfterExit
    spec = _server_spec(tmp_path)
    try:
        runtime.start("master", [spec])
        assert not (units_dir / ISOLATION_UNIT).exists()
        assert ["systemctl", "disable", "--now", ISOLATION_UNIT] in systemctl.calls
        assert (units_dir / "mac-master.service").exists()
    finally:
        runtime.stop("master", [spec])
