"""Another host on the master's network: a network namespace joined to this one by a veth.

The master runs here (the root namespace) and gets 198.18.22.1 on its end; the
namespace is the other host, 198.18.22.2. What the other host can reach on
198.18.22.1 is what any machine beside the master could (issue 22). 198.18.0.0/15 is
reserved for such testing (ARCHITECTURE.md); the veth and the namespace are deleted at
the end, and what a killed run left is cleared first (testkit.namespaces). Needs root,
iproute2 and curl.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from testkit import namespaces
from testkit.netns import sh

MASTER_SIDE, OTHER_SIDE = "198.18.22.1", "198.18.22.2"


@dataclass(frozen=True)
class OtherHost:
    """The namespace standing in for another host; `master` is how it reaches us."""

    netns: str
    master: str = MASTER_SIDE

    def curl(self, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
        """curl inside the namespace: `-w` appends the status ("000": nothing answered).

        `timeout` is long: what answers, answers at once, and a busy machine's first
        request through nginx's auth_request to Django can take seconds."""
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, "curl", "-s", "-m", str(timeout),
             "-w", "\n%{http_code}", *args],
            capture_output=True, text=True, timeout=timeout + 10, check=False,
        )  # fmt: skip

    def status(self, url: str, *args: str) -> str:
        return self.curl(*args, url).stdout.rsplit("\n", 1)[-1]

    def connects(self, port: int) -> bool:
        """Whether a TCP connection to the master's port opens (refused or silent: no)."""
        done = subprocess.run(
            ["ip", "netns", "exec", self.netns, "bash", "-c",
             f"exec 3<>/dev/tcp/{self.master}/{port}"],
            capture_output=True, timeout=10, check=False,
        )  # fmt: skip
        return done.returncode == 0


def why_unavailable() -> str:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "curl"):
        if subprocess.run(["which", tool], capture_output=True, check=False).returncode:
            return f"needs {tool}"
    return ""


@contextmanager
def other_host(prefix: str = "door") -> Iterator[OtherHost]:
    tag = f"{prefix}{os.getpid() % 100000}"
    netns, here, there = f"mac{tag}o", f"{tag}h", f"{tag}o"
    # What a killed run left would share 198.18.22.0/24 with this one (testkit.namespaces).
    namespaces.clear_left_behind(f"mac{prefix}", OTHER_SIDE)
    sh("ip", "netns", "add", netns)
    namespaces.claim(netns)
    try:
        sh("ip", "-n", netns, "link", "set", "lo", "up")
        sh("ip", "link", "add", here, "type", "veth", "peer", "name", there)
        sh("ip", "link", "set", there, "netns", netns)
        sh("ip", "addr", "add", f"{MASTER_SIDE}/24", "dev", here)
        sh("ip", "link", "set", here, "up")
        sh("ip", "-n", netns, "addr", "add", f"{OTHER_SIDE}/24", "dev", there)
        sh("ip", "-n", netns, "link", "set", there, "up")
        yield OtherHost(netns)
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
        namespaces.release(netns)
