"""Under a real systemd: the mac-agent unit, the networkd drop-in of --fix, journald's carrier.

One Debian tree booted once for this module with systemd-nspawn (testkit.nspawn): PID 1
is systemd, systemd-networkd manages the container's host0 in the container's own
network namespace, and the checkout runs inside it unchanged. Skipped, with the
reason, only where nspawn cannot boot (not root, no systemd-container, no mirror).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from testkit.nspawn import NspawnUnavailable, booted
from testkit.waiting import wait_for

# The first run on a machine builds the tree with debootstrap (a few minutes).
pytestmark = [pytest.mark.slow, pytest.mark.nspawn, pytest.mark.timeout(900)]

UNIT = "mac-agent.service"
DROPIN = "/etc/systemd/network/80-container-host0.network.d/mac-ipforward.conf"


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    try:
        with booted(tmp_path_factory.mktemp("nspawn")) as machine:
            probe = machine.python("import aiohttp, maccli.main, exporters.ipforward")
            assert probe.returncode == 0, f"the checkout's Python fails in the tree: {probe.stderr}"
            yield machine
    except NspawnUnavailable as exc:
        pytest.skip(f"systemd-nspawn cannot boot a tree here: {exc}")


RUNTIME = """
import json, os, sys
from pathlib import Path
from maccli.runtimes.base import ServiceSpec
from maccli.runtimes.process import ProcessRuntime
from maccli.systemd import SystemdUnits
runtime = ProcessRuntime(Path("/var/lib/mac-test"), grace=5, systemd=SystemdUnits())
web = ServiceSpec("web", [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "18080"],
                  port=18080, liveness_path="/")
action = runtime.start if os.environ["ACTION"] == "start" else runtime.stop
print(json.dumps([state.__dict__ for state in action("agent", [web])]))
"""
ANSWERS = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:18080/', timeout=2)"


def _show(machine, prop: str) -> str:
    return machine.run("systemctl", "show", "-p", prop, "--value", UNIT).stdout.strip()


def test_the_agent_unit_starts_at_boot_runs_and_comes_back_after_a_kill(machine):
    started = machine.python(RUNTIME, ACTION="start")
    assert started.returncode == 0, started.stderr
    [state] = json.loads(started.stdout)
    assert state["state"] == "running" and state["health"] == "ok"
    assert machine.run("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    assert (
        machine.run("test", "-L", f"/etc/systemd/system/multi-user.target.wants/{UNIT}").returncode
        == 0
    )
    assert machine.run("systemctl", "is-active", UNIT).stdout.strip() == "active"
    first = _show(machine, "MainPID")
    command = machine.run("cat", f"/proc/{first}/cmdline").stdout.replace("\0", " ")
    assert "supervisor.supervisord" in command and " -n" in command

    machine.run("kill", "-KILL", first)
    wait_for(
        lambda: (
            _show(machine, "NRestarts") == "1" and _show(machine, "MainPID") not in {"0", first}
        ),
        timeout=30,
        what="systemd to restart the unit",
    )
    # Restart=always brought supervisord back, and supervisord its service.
    wait_for(lambda: machine.python(ANSWERS).returncode == 0, what="the service to answer again")

    stopped = machine.python(RUNTIME, ACTION="stop")
    assert stopped.returncode == 0, stopped.stderr
    assert machine.run("test", "-e", f"/etc/systemd/system/{UNIT}").returncode != 0
    assert machine.run("systemctl", "is-active", UNIT).stdout.strip() == "inactive"
    assert machine.python(ANSWERS).returncode != 0


def _forwarding(machine) -> str:
    return machine.run("cat", "/proc/sys/net/ipv4/ip_forward").stdout.strip()


def _reset_and_reconfigure(machine) -> None:
    assert machine.run("sysctl", "-qw", "net.ipv4.ip_forward=0").returncode == 0
    assert machine.run("networkctl", "reconfigure", "host0").returncode == 0


def _mac(machine, *args: str):
    return machine.python("import sys; from maccli.main import main; sys.exit(main())", *args)


def test_the_networkd_drop_in_brings_forwarding_back_after_a_reconfigure(machine):
    version = int(machine.run("systemctl", "--version").stdout.split()[1])
    key = "IPv4Forwarding" if version >= 256 else "IPForward"
    # Without the drop-in, networkd leaves a reset flag at 0.
    _reset_and_reconfigure(machine)
    time.sleep(2)
    assert _forwarding(machine) == "0"

    before = _mac(machine, "doctor", "--json", "ip_forward_networkd")
    [check] = json.loads(before.stdout)["checks"]
    assert check["status"] == "fail", check
    assert f"{key}=yes" in check["fix"] and "networkctl reconfigure host0" in check["fix"]

    fixed = _mac(machine, "doctor", "--fix", "--yes", "ip_forward_networkd")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "  now pass: ip_forward_networkd" in fixed.stdout
    assert machine.run("cat", DROPIN).stdout == f"[Network]\n{key}=yes\n"
    wait_for(lambda: _forwarding(machine) == "1", what="networkd to turn forwarding on")

    # The guide's failure: something resets the flag, the link is reconfigured.
    _reset_and_reconfigure(machine)
    wait_for(lambda: _forwarding(machine) == "1", what="forwarding back on after the reconfigure")

    again = _mac(machine, "doctor", "--fix", "--yes", "ip_forward_networkd")
    assert again.stdout.strip() == "Nothing to fix: ip_forward_networkd passes."


@pytest.mark.skipif(not shutil.which("ip"), reason="iproute2 missing")
def test_journald_names_the_link_that_gained_carrier(machine):
    # The host end of the veth going up is host0 gaining carrier inside.
    subprocess.run(["ip", "link", "set", machine.host_veth, "up"], check=True)
    code = (
        "import time; from exporters.ipforward import last_carrier_gain; "
        "from node.runner import run_command; "
        "gain = last_carrier_gain(run_command, time.time()); print(gain.link if gain else '')"
    )
    link = wait_for(
        lambda: machine.python(code).stdout.strip(), timeout=20, what="journald's Gained carrier"
    )
    assert link == "host0"
