"""read_forwarding against the kernel: a process in a network namespace of its own (as
sys-manager in bridge mode) reads the flag of the host's pid 1, not its own (root only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.netns import REPO, sh
from tests.conftest import netns_marks

pytestmark = netns_marks("ip", "sysctl", slow=False)
READ = (
    "import sys; from node.checks.network import read_forwarding; from node.host import Roots; "
    "found = read_forwarding(Roots(), sys.argv[1] == 'apart'); print(found.value, found.problem)"
)


@pytest.fixture
def namespace():
    """A namespace whose forwarding is the opposite of this one's."""
    name = f"macfwd{os.getpid()}"
    here = int(Path("/proc/sys/net/ipv4/ip_forward").read_text())
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "netns", "exec", name, "sysctl", "-qw", f"net.ipv4.ip_forward={1 - here}")
        yield name, here
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _read(namespace: str, which: str) -> str:
    argv = ["ip", "netns", "exec", namespace, sys.executable, "-c", READ, which]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=True).stdout


def test_a_namespace_of_its_own_reads_pid_1s_flag(namespace):
    name, here = namespace
    assert _read(name, "apart").split() == [str(here)]  # the host's (pid 1's), not its own
    assert _read(name, "shared").split() == [str(1 - here)]  # its own namespace's
