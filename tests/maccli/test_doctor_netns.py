"""`mac doctor` inside the network-namespace reproduction of the ip_forward failure (root only).

Recipe of ARCHITECTURE.md: namespaces master, agent and ctr; sys-exporter runs in ctr
behind a DNAT of port 29101 on the agent (a bridge container), nic-exporter on the
agent itself (host network). As under Docker, the agent reaches its own published
port through an OUTPUT DNAT, so the exporters look fine locally while the master
sees only nic-exporter. Doctor, run inside the agent namespace, must name the cause
and the command; after that command the master reaches sys-exporter again.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testkit.netns import AGENT_IP, REPO, forwarding_off_lab, http_code, real_exporters, sh
from tests.conftest import netns_marks

pytestmark = netns_marks("ip", "iptables", "curl")


@pytest.fixture
def lab(tmp_path):
    with forwarding_off_lab("h") as names, real_exporters(names, tmp_path):
        yield names


def doctor_in(ns: str, mac_env) -> tuple[int, dict[str, dict]]:
    done = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "maccli.main", "doctor", "--json"],
        capture_output=True, text=True, env=mac_env.env, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    payload = json.loads(done.stdout)
    return done.returncode, {check["id"]: check for check in payload["checks"]}


def test_doctor_finds_forwarding_off_and_its_fix_brings_the_exporters_back(lab, mac_env):
    mac_env.env.pop("MAC_PROC_ROOT")  # the namespace's own /proc/sys/net
    mac_env.env.update(
        {
            "MAC_BIND": AGENT_IP,
            "MAC_AGENT_SERVICES": "sys-exporter,nic-exporter",
            "MAC_ETC_ROOT": str(mac_env.root / "etc"),
            "MAC_RDMA_INTERVAL": "0.05",  # the shortest the setting allows
        }
    )
    # The master's view: the host-network exporter answers, the bridge one does not.
    assert http_code(lab["master"], f"http://{AGENT_IP}:29500/metrics") == "200"
    assert http_code(lab["master"], f"http://{AGENT_IP}:29101/metrics") == "000"

    code, checks = doctor_in(lab["agent"], mac_env)
    assert code == 1
    assert checks["ip_forward"]["status"] == "fail"
    assert "net.ipv4.ip_forward = 0" in checks["ip_forward"]["detail"]
    assert checks["ip_forward"]["fix"] == "sudo sysctl -w net.ipv4.ip_forward=1"
    # Locally everything answers: exactly the guide's confusing symptom.
    assert checks["service:sys-exporter"]["status"] == "pass"
    assert checks["service:nic-exporter"]["status"] == "pass"

    # Apply the printed fix inside the agent (we are root: no sudo).
    fix = checks["ip_forward"]["fix"].removeprefix("sudo ")
    sh("ip", "netns", "exec", lab["agent"], "sh", "-c", fix)

    _code, checks = doctor_in(lab["agent"], mac_env)
    assert checks["ip_forward"]["status"] == "pass"
    assert http_code(lab["master"], f"http://{AGENT_IP}:29101/metrics") == "200"
