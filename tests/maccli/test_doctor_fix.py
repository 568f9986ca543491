"""`mac doctor --fix` as a subprocess on prepared trees: ask, dry run, apply, check again.

The system-changing fixes for real (a network namespace, a real non-root user) are in
test_doctor_fix_netns.py; under a real systemd-networkd in test_nspawn_systemd.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.maccli.conftest import loopback_address

FAKE_DOCKER = Path(__file__).with_name("fake_docker.py")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def node(mac_env):
    """A node tree with forwarding off, no sysctl.d file, no docker and no systemctl."""
    root = mac_env.root / "node"
    _write(root / "proc/sys/net/ipv4/ip_forward", "0\n")
    _write(root / "proc/mounts", "/dev/vda1 / ext4 rw 0 0\n")
    (root / "etc").mkdir(parents=True)
    bin_dir = mac_env.root / "bin"
    bin_dir.mkdir()
    mac_env.env.update(
        {
            "MAC_PROC_ROOT": str(root / "proc"),
            "MAC_ETC_ROOT": str(root / "etc"),
            "MAC_SYSTEMD": "no",
            "PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}:/usr/bin:/bin",
        }
    )
    return root


def test_dry_run_prints_the_exact_commands_and_changes_nothing(mac_env, node):
    result = mac_env.run("doctor", "--fix", "--dry-run", "ip_forward", "ip_forward_persisted")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert "  sudo sysctl -w net.ipv4.ip_forward=1" in lines
    assert (
        "  echo 'net.ipv4.ip_forward = 1' | sudo tee /etc/sysctl.d/99-mac-ipforward.conf" in lines
    )
    assert "  sudo sysctl -p /etc/sysctl.d/99-mac-ipforward.conf" in lines
    assert not any("--system" in line for line in lines)
    assert "Dry run: nothing was changed." in lines
    assert (node / "proc/sys/net/ipv4/ip_forward").read_text() == "0\n"
    assert not (node / "etc/sysctl.d").exists()


def test_without_a_terminal_the_answer_is_no(mac_env, node):
    result = mac_env.run("doctor", "--fix", "ip_forward")  # stdin is a pipe, not a terminal
    assert result.returncode == 1
    assert "Apply these fixes? [y/N] no (standard input is not a terminal" in result.stdout
    assert result.stdout.rstrip().endswith("Nothing was changed.")
    assert (node / "proc/sys/net/ipv4/ip_forward").read_text() == "0\n"


def test_yes_applies_checks_again_and_a_second_fix_has_nothing_to_do(mac_env, node):
    result = mac_env.run("doctor", "--fix", "--yes", "ip_forward")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "  $ sudo sysctl -w net.ipv4.ip_forward=1" in lines
    assert "  now pass: ip_forward: net.ipv4.ip_forward = 1" in lines
    assert lines[-1] == "Fixed: every check asked for passes now."
    assert (node / "proc/sys/net/ipv4/ip_forward").read_text() == "1\n"

    again = mac_env.run("doctor", "--fix", "--yes", "ip_forward")
    assert again.returncode == 0
    assert again.stdout.strip() == "Nothing to fix: ip_forward passes."


def test_unknown_checks_are_a_usage_error_naming_the_valid_ones(mac_env, node):
    result = mac_env.run("doctor", "--fix", "--yes", "ip_forwrd")
    assert result.returncode == 2
    assert "Error: unknown check 'ip_forwrd'." in result.stderr
    assert "ip_forward, ip_forward_persisted, ip_forward_networkd" in result.stderr
    assert mac_env.run("doctor", "--dry-run").returncode == 2  # --dry-run needs --fix


def test_a_fix_left_to_the_operator_is_printed_not_applied(mac_env, node):
    result = mac_env.run("doctor", "--fix", "--yes", "master_ip")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(
        line.startswith("Not applied by --fix (run it yourself) for master_ip") for line in lines
    )
    assert "  mac env set MASTER_IP=<master-ip>" in lines
    assert not mac_env.user_file.exists() or "MASTER_IP" not in mac_env.user_file.read_text()


def test_services_that_are_down_come_back_through_mac_restart_agent(mac_env, node):
    address = loopback_address(7)
    mac_env.env.update({"MAC_BIND": address, "MAC_AGENT_SERVICES": "nic-exporter"})
    try:
        before = mac_env.run("doctor", "--json", "service")
        [check] = json.loads(before.stdout)["checks"]
        assert check["status"] == "fail" and check["fix"] == "mac restart agent"

        result = mac_env.run("doctor", "--fix", "--yes", "service")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "  $ mac restart agent" in result.stdout
        assert f"  now pass: service:nic-exporter: http://{address}:29500/metrics answered 200" in (
            result.stdout
        )
        assert "Restarted. This node is not registered yet" in result.stdout
    finally:
        mac_env.run("stop", "agent")


def test_stale_containers_are_removed_by_name_and_ours_are_kept(mac_env, node):
    state = mac_env.root / "docker-state"
    state.mkdir()
    (state / "containers.json").write_text(
        json.dumps(
            [
                {"id": "a1", "name": "mac-sys-exporter", "project": "deploy", "service": "x"},
                {"id": "a2", "name": "mac-nic-exporter", "project": "mac", "service": "y"},
            ]
        )
    )
    docker = mac_env.root / "bin/docker"
    docker.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_DOCKER}" "$@"\n')
    docker.chmod(0o755)
    mac_env.env["FAKE_DOCKER_STATE"] = str(state)

    result = mac_env.run("doctor", "--fix", "--yes", "stale_containers")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  $ docker rm -f mac-sys-exporter" in result.stdout.splitlines()
    assert "rm -f mac-sys-exporter" in (state / "calls.log").read_text().splitlines()
    left = json.loads((state / "containers.json").read_text())
    assert [row["name"] for row in left] == ["mac-nic-exporter"]


def test_the_nvidia_container_toolkit_is_never_installed_only_its_commands_shown(mac_env, node):
    gpu = node / "sys/bus/pci/devices/0000:3b:00.0"
    _write(gpu / "vendor", "0x10de\n")
    _write(gpu / "class", "0x030200\n")
    (node / "dev").mkdir()
    docker = mac_env.root / "bin/docker"  # a Docker client, and no nvidia-ctk beside it
    docker.write_text("#!/bin/sh\nexit 1\n")
    docker.chmod(0o755)
    mac_env.env.update({"MAC_SYS_ROOT": str(node / "sys"), "MAC_DEV_ROOT": str(node / "dev")})

    result = mac_env.run("doctor", "--fix", "--yes", "nvidia_toolkit")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(
        line.startswith("Not applied by --fix (run it yourself) for nvidia_toolkit: 1 NVIDIA GPU")
        for line in lines
    ), lines
    assert "  sudo apt install nvidia-container-toolkit" in lines
    assert not any(line.startswith("Fixing") or "  $ " in line for line in lines)
    assert "Nothing here can be applied by --fix; run the commands above." in lines
