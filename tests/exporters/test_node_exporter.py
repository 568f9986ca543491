"""sys-exporter is the real node_exporter: its command line, MAC's facts, a missing program.

The processes here are the real Debian prometheus-node-exporter (scripts/bootstrap
installs it) started the way `mac` starts it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from contract.services import SYS_EXPORTER
from exporters import node_exporter
from maccli.agent.specs import agent_specs
from maccli.output import CliError
from maccli.runtimes.process import ProcessRuntime
from node.config import NodeConfig
from node.host import PROGRAMS, Roots, find_node_exporter
from testkit.macenv import own_files
from testkit.ports import free_port
from tests.exporters.conftest import ROOT
from tests.exporters.dashboards import HERE

NEF = yaml.safe_load((HERE / "node-exporter-full-1860.yml").read_text())

pytestmark = pytest.mark.skipif(
    not os.path.exists(PROGRAMS[0]),
    reason="Debian's prometheus-node-exporter is not installed (scripts/bootstrap installs it)",
)


def argv(**kwargs) -> list[str]:
    return node_exporter.node_exporter_argv("/usr/bin/prometheus-node-exporter", **kwargs)


@pytest.mark.parametrize(
    ("bind", "address"),
    [("0.0.0.0", ":29101"), ("", ":29101"), ("127.0.0.7", "127.0.0.7:29101"),
     ("::", "[::]:29101"), ("fd00::7", "[fd00::7]:29101")],
)  # fmt: skip
def test_it_listens_where_mac_bind_says(bind, address):
    assert f"--web.listen-address={address}" in argv(bind=bind, port=29101, textfile_dir="/t")


def test_it_keeps_the_hung_mount_guard_and_leaves_infiniband_to_nic_exporter():
    args = argv(textfile_dir="/t", mount_timeout=3)
    assert "--collector.filesystem.mount-timeout=3s" in args
    assert "--no-collector.infiniband" in args
    assert "--collector.textfile.directory=/t" in args
    for collector in ("processes", "interrupts", "tcpstat"):
        assert f"--collector.{collector}" in args


def test_it_turns_systemd_on_only_where_systemd_answers(tmp_path):
    assert "--no-collector.systemd" in argv(textfile_dir="/t", systemd=False)
    assert "--collector.systemd" in argv(textfile_dir="/t", systemd=True)
    (tmp_path / "run" / "systemd" / "system").mkdir(parents=True)
    socket = tmp_path / "private"
    assert not node_exporter.host_runs_systemd(Roots(rootfs=str(tmp_path)), sockets=(str(socket),))
    socket.touch()
    assert node_exporter.host_runs_systemd(Roots(rootfs=str(tmp_path)), sockets=(str(socket),))


def test_debian_node_exporter_accepts_every_flag_mac_passes(tmp_path):
    """Debian's 1.5 has the hidden mount-timeout flag: an unknown flag would exit at once."""
    program = find_node_exporter()
    result = subprocess.run(
        [*argv(textfile_dir=str(tmp_path)), "--web.listen-address=127.0.0.1:0", "--version"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert program and result.returncode == 0, result.stderr


def test_it_runs_every_collector_node_exporter_full_reads(start_exporter):
    process = start_exporter("sys-exporter", ready="/metrics")
    _, metrics, _ = process.get("/metrics")
    running = {
        line.split('"')[1]
        for line in metrics.splitlines()
        if line.startswith("node_scrape_collector_success{")
    }
    wanted = set(NEF["collectors"])
    if not node_exporter.host_runs_systemd():
        wanted.discard("systemd")  # off on purpose where it could only fail
        assert "systemd" not in running
    assert wanted <= running, sorted(wanted - running)


def test_macs_facts_are_served_through_the_textfile_collector(tmp_path, start_exporter):
    process = start_exporter(
        "sys-exporter", env={"MAC_TEXTFILE_DIR": str(tmp_path)}, ready="/metrics"
    )
    _, metrics, _ = process.get("/metrics")
    assert 'mac_exporter_build_info{service="sys-exporter",version="' in metrics
    assert "node_textfile_scrape_error 0" in metrics
    assert [p.name for p in tmp_path.iterdir()] == ["mac.prom"]  # no temporary file left


def test_a_missing_node_exporter_says_how_to_install_it(tmp_path):
    env = {**os.environ, "MAC_NODE_EXPORTER": str(tmp_path / "no-node-exporter")}
    for command in (
        ["-m", "exporters", "sys-exporter", "--bind", "127.0.0.1", "--port", "0"],
        ["-m", "exporters.node_exporter", "--textfile-dir", str(tmp_path)],
    ):
        result = subprocess.run(
            [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert result.returncode == 1, result.stderr
        assert "node_exporter is not installed" in result.stderr
        assert "apt-get install -y prometheus-node-exporter" in result.stderr


def test_the_process_runtime_runs_node_exporter_with_macs_ports(tmp_path):
    cfg = NodeConfig.load(
        {
            **own_files(tmp_path),
            "MAC_BIND": "127.0.0.1",
            "MAC_PORT_OFFSET": "7",
            "MAC_STATE_DIR": str(tmp_path),
            "MAC_AGENT_SERVICES": "sys-exporter",
            "HOME": str(tmp_path),
        }
    )
    (spec,) = agent_specs(cfg)
    assert spec.argv[0] == find_node_exporter()
    assert f"--web.listen-address=127.0.0.1:{SYS_EXPORTER.port + 7}" in spec.argv
    assert f"--collector.textfile.directory={tmp_path / 'agent' / 'textfile'}" in spec.argv
    assert spec.prestart[0][1:3] == ["-m", "exporters.node_exporter"]


def test_mac_start_fails_with_the_install_command_where_node_exporter_is_missing(tmp_path):
    cfg = NodeConfig.load(
        {
            **own_files(tmp_path),
            "MAC_BIND": "127.0.0.1",
            "MAC_STATE_DIR": str(tmp_path),
            "MAC_AGENT_SERVICES": "sys-exporter",
            "MAC_NODE_EXPORTER": str(tmp_path / "no-node-exporter"),
            "MAC_SYS_EXPORTER_PORT": str(free_port()),
            "HOME": str(tmp_path),
        }
    )
    specs = agent_specs(cfg)
    specs[0].env["MAC_NODE_EXPORTER"] = str(tmp_path / "no-node-exporter")
    with pytest.raises(CliError) as caught:
        ProcessRuntime(tmp_path).start("agent", specs)
    assert "sys-exporter" in caught.value.message
    assert "apt-get install -y prometheus-node-exporter" in caught.value.hint


def _check(tmp_path, **env: str):
    from node.checks import CheckContext
    from node.checks.services import check_node_exporter

    cfg = NodeConfig.load({**own_files(tmp_path), "HOME": str(tmp_path), **env})
    return check_node_exporter(CheckContext(extra={"config": cfg, "path": str(tmp_path)}))


def test_mac_doctor_fails_with_the_install_command_where_node_exporter_is_missing(tmp_path):
    result = _check(tmp_path)
    assert result.status == "fail"
    assert result.fix.splitlines()[0] == "sudo apt-get install -y prometheus-node-exporter"
    # Under Docker the image brings node_exporter: nothing to install on the host.
    assert _check(tmp_path, MAC_RUNTIME="docker").status == "skip"


def test_mac_doctor_passes_with_node_exporters_version(tmp_path):
    program = tmp_path / "prometheus-node-exporter"
    program.symlink_to(PROGRAMS[0])
    result = _check(tmp_path)
    assert result.status == "pass"
    assert "node_exporter, version 1.5" in result.detail
