"""A host that can be cut off the network for real: one network namespace, one veth.

The detection test and bench/detection.py need the master's ordinary sweep (this
process, its database and Redis on loopback) to probe an agent that then vanishes
the way a dead host or a pulled cable looks from the master: packets go out and
nothing comes back. So the agent lives in a namespace of its own, joined to this
namespace by a veth pair with a /30 out of 198.18.0.0/15 (reserved for such tests):
198.18.N.(4k+1) here, 198.18.N.(4k+2) in the namespace, N and k from our pid so that
parallel runs never share a subnet. `cut()` adds an iptables DROP of everything
arriving in the namespace (the probe's SYNs vanish, it can only time out) and
`restore()` removes it. Deleting the namespace at the end deletes both veth ends.
Needs root, iproute2 and iptables.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from testkit.netns import sh

DROP_ALL = ("INPUT", "-j", "DROP")


@dataclass(frozen=True)
class CutLab:
    """The namespace of one agent and the two ends of its link."""

    namespace: str
    agent_ip: str
    master_ip: str

    def cut(self) -> None:
        sh("ip", "netns", "exec", self.namespace, "iptables", "-I", *DROP_ALL)

    def restore(self) -> None:
        """Undo cut(); a host that is not cut is left as it is."""
        check = ["ip", "netns", "exec", self.namespace, "iptables", "-C", *DROP_ALL]
        while subprocess.run(check, capture_output=True, check=False).returncode == 0:
            sh("ip", "netns", "exec", self.namespace, "iptables", "-D", *DROP_ALL)

    def exec_args(self, *command: str) -> list[str]:
        """`command` run inside the agent's namespace."""
        return ["ip", "netns", "exec", self.namespace, *command]


def lab_addresses(pid: int) -> tuple[str, str]:
    """(here, there): a /30 of 198.18.0.0/15 picked from `pid`."""
    third, block = 100 + pid % 150, (pid // 150) % 64
    return f"198.18.{third}.{4 * block + 1}", f"198.18.{third}.{4 * block + 2}"


@contextmanager
def cut_lab(prefix: str) -> Iterator[CutLab]:
    """The agent namespace, reachable from here; deleted (with its veth) on exit."""
    tag = f"{prefix}{os.getpid()}"
    namespace, here_dev, there_dev = f"mac{tag}", f"{tag}h", f"{tag}t"
    here, there = lab_addresses(os.getpid())
    sh("ip", "netns", "add", namespace)
    try:
        sh("ip", "-n", namespace, "link", "set", "lo", "up")
        sh("ip", "link", "add", here_dev, "type", "veth", "peer", "name", there_dev)
        sh("ip", "link", "set", there_dev, "netns", namespace)
        sh("ip", "addr", "add", f"{here}/30", "dev", here_dev)
        sh("ip", "link", "set", here_dev, "up")
        sh("ip", "-n", namespace, "addr", "add", f"{there}/30", "dev", there_dev)
        sh("ip", "-n", namespace, "link", "set", there_dev, "up")
        yield CutLab(namespace, there, here)
    finally:
        subprocess.run(["ip", "link", "del", here_dev], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], check=False)
