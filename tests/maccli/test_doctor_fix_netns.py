"""`mac doctor --fix` for real, in a network namespace with IPv4 forwarding off (root only).

The namespace's own net.ipv4.ip_forward is what the fix turns on (/proc/sys/net is per
namespace); the sysctl.d file goes into a scratch etc root (MAC_ETC_ROOT), so this
machine's /etc is never written. `sysctl -p` of that one file, the persist fix's second
step, runs in the namespace too; no other sysctl file of this machine is applied. The
refusal is run by a real unprivileged user
(`nobody`, through setpriv), not by a switch of MAC's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from testkit.macenv import scratch_mac_env
from testkit.netns import sh
from tests.conftest import netns_marks

pytestmark = netns_marks("ip", "setpriv", "sysctl", slow=False)
CHECKS = ("ip_forward", "ip_forward_persisted")
NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")


@pytest.fixture
def namespace():
    name = f"macfix{os.getpid()}"
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "-n", name, "link", "set", "lo", "up")
        sh("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.ip_forward=0")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def scratch():
    """A folder every user can read (pytest's own tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="mac-fix-"))
    path.chmod(0o755)
    (path / "etc").mkdir()
    yield path
    shutil.rmtree(path)


def _env(scratch: Path) -> dict[str, str]:
    # A bridge-mode node (the guide's layout), where forwarding carries the exporters'
    # traffic: on a new install with no mode chosen, forwarding off is no problem at all.
    return scratch_mac_env(
        scratch,
        MAC_ETC_ROOT=str(scratch / "etc"),
        MAC_AGENT_NETWORK="bridge",
        PYTHONDONTWRITEBYTECODE="1",
    )


def _mac(namespace: str, scratch: Path, *args: str, prefix: tuple[str, ...] = ()):
    return subprocess.run(
        ["ip", "netns", "exec", namespace, *prefix, sys.executable, "-m", "maccli.main", *args],
        env=_env(scratch), cwd=scratch, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _forwarding(namespace: str) -> str:
    return sh("ip", "netns", "exec", namespace, "cat", "/proc/sys/net/ipv4/ip_forward").strip()


def test_fix_turns_forwarding_on_persists_it_and_a_second_run_changes_nothing(namespace, scratch):
    host_before = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    conf = scratch / "etc/sysctl.d/99-mac-ipforward.conf"

    dry = _mac(namespace, scratch, "doctor", "--fix", "--dry-run", *CHECKS)
    assert dry.returncode == 1, dry.stdout + dry.stderr
    assert "  sudo sysctl -w net.ipv4.ip_forward=1" in dry.stdout.splitlines()
    assert _forwarding(namespace) == "0" and not conf.exists()

    fixed = _mac(namespace, scratch, "doctor", "--fix", "--yes", *CHECKS)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert _forwarding(namespace) == "1"
    assert conf.read_text() == "net.ipv4.ip_forward = 1\n"
    assert "  now pass: ip_forward: net.ipv4.ip_forward = 1" in fixed.stdout.splitlines()

    after = _mac(namespace, scratch, "doctor", "--json", *CHECKS)
    statuses = {check["id"]: check["status"] for check in json.loads(after.stdout)["checks"]}
    assert statuses == {"ip_forward": "pass", "ip_forward_persisted": "pass"}
    assert after.returncode == 0

    written = conf.stat().st_mtime_ns
    again = _mac(namespace, scratch, "doctor", "--fix", "--yes", *CHECKS)
    assert again.returncode == 0
    assert again.stdout.strip() == "Nothing to fix: ip_forward, ip_forward_persisted pass."
    assert conf.stat().st_mtime_ns == written
    # Only the namespace changed.
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == host_before


def test_the_persist_fix_applies_mac_s_file_alone(namespace, scratch):
    """Forwarding is on afterwards only because the file just written was applied."""
    conf = scratch / "etc/sysctl.d/99-mac-ipforward.conf"
    fixed = _mac(namespace, scratch, "doctor", "--fix", "--yes", "ip_forward_persisted")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "  sudo sysctl -p /etc/sysctl.d/99-mac-ipforward.conf" in fixed.stdout.splitlines()
    assert "--system" not in fixed.stdout
    assert conf.read_text() == "net.ipv4.ip_forward = 1\n"
    assert _forwarding(namespace) == "1"


def test_a_non_root_user_is_told_to_use_root_and_nothing_changes(namespace, scratch):
    probe = subprocess.run(
        [*NOBODY, sys.executable, "-c", "import maccli.main"],
        env=_env(scratch),
        cwd=scratch,
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(
            f"nobody cannot run {sys.executable} with this checkout: {probe.stderr[-200:]!r}"
        )
    refused = _mac(namespace, scratch, "doctor", "--fix", "--yes", *CHECKS, prefix=NOBODY)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "Error: these fixes change the system and need root; nothing was changed." in (
        refused.stderr
    )
    assert "  sudo mac doctor --fix ip_forward ip_forward_persisted" in refused.stderr
    # The commands were shown all the same.
    assert "  sudo sysctl -w net.ipv4.ip_forward=1" in refused.stdout.splitlines()
    assert _forwarding(namespace) == "0"
    assert not (scratch / "etc/sysctl.d").exists()
