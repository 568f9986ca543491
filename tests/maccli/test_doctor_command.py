"""`mac doctor` as operators run it: on this very machine, on prepared trees, and healthy."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from node.checks import CheckStatus
from testkit.ports import free_port

EXPECTED = {
    "master_ip",
    "node_name",
    "master_pinned",
    "master_reachable",
    "node_registered",
    "ip_forward",
    "ip_forward_persisted",
    "ip_forward_networkd",
    "docker_enabled",
    "stale_containers",
    "nvidia_toolkit",
    "amd_devices",
    "amdgpu_module",
    "rdma_counters",
    "slurm",
}


def test_doctor_runs_on_this_machine(mac_env):
    # The real /proc, /sys, /dev and /etc of the machine running the tests.
    mac_env.env.pop("MAC_PROC_ROOT")
    mac_env.env["MAC_RDMA_INTERVAL"] = "0.2"
    result = mac_env.run("doctor", "--json")
    payload = json.loads(result.stdout)
    ids = {check["id"] for check in payload["checks"]}
    assert ids >= EXPECTED
    assert {f"service:{name}" for name in ("sys-exporter", "nic-exporter")} <= ids
    for check in payload["checks"]:
        assert check["status"] in {s.value for s in CheckStatus}
        assert check["title"] and (check["status"] != "fail" or check["fix"])
    failed = any(check["status"] == "fail" for check in payload["checks"])
    assert payload["ok"] is not failed
    assert result.returncode == (1 if failed else 0)
    # The person-facing form of the same run.
    text = mac_env.run("doctor")
    assert text.returncode == result.returncode
    assert "ip_forward" in text.stdout and " passed, " in text.stdout
    assert "Traceback" not in text.stderr


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _roots(mac_env, forward: str) -> dict[str, str]:
    root = mac_env.root / "node"
    _write(root / "proc/sys/net/ipv4/ip_forward", f"{forward}\n")
    _write(root / "proc/mounts", "/dev/vda1 / ext4 rw 0 0\n")
    _write(root / "proc/modules", "ext4 1 1 - Live 0x0\n")
    for name in ("sys/class/net", "dev", "run", "usr"):
        (root / name).mkdir(parents=True, exist_ok=True)
    if forward == "1":
        _write(root / "etc/sysctl.d/99-mac-ipforward.conf", "net.ipv4.ip_forward = 1\n")
    else:
        (root / "etc").mkdir(parents=True, exist_ok=True)
    empty_bin = mac_env.root / "empty-bin"
    empty_bin.mkdir(exist_ok=True)
    return {
        "MAC_PROC_ROOT": str(root / "proc"),
        "MAC_SYS_ROOT": str(root / "sys"),
        "MAC_DEV_ROOT": str(root / "dev"),
        "MAC_ETC_ROOT": str(root / "etc"),
        "MAC_RUN_ROOT": str(root / "run"),
        "MAC_USR_ROOT": str(root / "usr"),
        "MAC_LIB_ROOT": str(root / "lib"),
        # No docker and no systemctl on this prepared node.
        "PATH": f"{empty_bin}:{os.path.dirname(os.sys.executable)}",
    }


def test_forwarding_off_fails_and_prints_the_fix(mac_env):
    mac_env.env.update(_roots(mac_env, "0"))
    result = mac_env.run("doctor")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("fail") and "ip_forward " in line for line in lines)
    assert "  sudo sysctl -w net.ipv4.ip_forward=1" in lines
    assert (
        "  echo 'net.ipv4.ip_forward = 1' | sudo tee /etc/sysctl.d/99-mac-ipforward.conf" in lines
    )
    assert "  mac env set MASTER_IP=<master-ip>" in lines


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_healthy_registered_node_passes_everything(mac_env, live_master):
    mac_env.env.update(_roots(mac_env, "1"))
    mac_env.env.update(
        {
            "MASTER_IP": "127.0.0.1",
            "MAC_MASTER_PORT": str(live_master.port),
            "NODE_NAME": f"healthy-{os.getpid()}",
            "MAC_BIND": "127.0.0.1",
            "MAC_AGENT_SERVICES": "sys-exporter,nic-exporter",
            "MAC_SYS_EXPORTER_PORT": str(free_port()),
            "MAC_NIC_EXPORTER_PORT": str(free_port()),
        }
    )
    try:
        started = mac_env.run("start", "agent")
        assert started.returncode == 0, started.stderr
        result = mac_env.run("doctor", "--json")
    finally:
        mac_env.run("stop", "agent")
    payload = json.loads(result.stdout)
    statuses = {check["id"]: check["status"] for check in payload["checks"]}
    assert result.returncode == 0, statuses
    assert payload["ok"] is True
    for check_id in ("master_ip", "node_name", "master_reachable", "node_registered",
                     "service:sys-exporter", "service:nic-exporter", "ip_forward",
                     "ip_forward_persisted"):  # fmt: skip
        assert statuses[check_id] == "pass", (check_id, payload)
    # Joined by MASTER_IP alone: the one warning says the master is not verified.
    assert statuses.pop("master_pinned") == "warn"
    assert set(statuses.values()) <= {"pass", "skip"}


def test_docker_not_enabled_at_boot_is_reported_with_the_enable_command(mac_env):
    roots = _roots(mac_env, "1")
    bin_dir = mac_env.root / "empty-bin"
    # A host whose Docker is installed but disabled: systemctl says so.
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(
        '#!/bin/sh\ncase "$1" in is-enabled) echo disabled; exit 1;; '
        "--version) echo 'systemd 252 (252.39-1~deb12u2)';; *) echo inactive; exit 3;; esac\n"
    )
    systemctl.chmod(0o755)
    unit = mac_env.root / "node/usr/lib/systemd/system/docker.service"
    _write(unit, "[Unit]\nDescription=Docker Application Container Engine\n")
    mac_env.env.update(roots)
    result = mac_env.run("doctor")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("fail") and "docker.service is disabled" in line for line in lines)
    assert "  sudo systemctl enable --now docker" in lines


def test_services_down_together_get_their_shared_fix_once(mac_env):
    mac_env.env.update(_roots(mac_env, "1"))
    # Nothing listens on this address: every service check fails the same way.
    mac_env.env.update({"MAC_BIND": "127.254.1.1"})
    result = mac_env.run("doctor")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    failed_services = [line for line in lines if line.startswith("fail") and "service:" in line]
    assert len(failed_services) == 6
    # No GPU in the node's trees: the GPU exporters have nothing to watch, and are skipped.
    skipped = [line for line in lines if line.startswith("skip") and "service:" in line]
    assert sorted(line.split()[1] for line in skipped) == [
        "service:dcgm-exporter", "service:rocm-exporter"
    ]  # fmt: skip
    headings = [line for line in lines if line.startswith("Fix for service:")]
    assert len(headings) == 1
    assert all(f"service:{name}" in headings[0] for name in ("sys-exporter", "mango-sdk-agent"))
    assert lines.count("  mac restart agent") == 1
