"""The network-namespace reproduction of the ip_forward failure, shared by its tests.

Recipe of ARCHITECTURE.md: namespaces master, agent and ctr; veth master<->agent
(198.18.0.1/24, 198.18.0.2/24) and agent<->ctr (198.19.0.1/24, 198.19.0.2/24, default
route in ctr via the agent); in agent, sys-exporter's port is DNAT'd to the
"container" 198.19.0.2, and IPv4 forwarding is off. As under Docker, the DNAT is in
PREROUTING (what the master sends) and OUTPUT (the agent reaching its own published
port). The tests start their servers inside the namespaces; needs root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contract.services import SYS_EXPORTER

MASTER_IP, AGENT_IP, AGENT_CTR_IP, CTR_IP = "198.18.0.1", "198.18.0.2", "198.19.0.1", "198.19.0.2"
REPO = Path(__file__).resolve().parents[1]


def sh(*args: str) -> str:
    """Run a command; its stdout, or RuntimeError with its stderr."""
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


@contextmanager
def forwarding_off_lab(prefix: str) -> Iterator[dict[str, str]]:
    """The three namespaces, named after `prefix` and our pid; deleted on exit.

    Yields {"master": ..., "agent": ..., "ctr": ...}. Deleting a namespace deletes
    the veth ends in it, so nothing else is left behind.
    """
    tag = f"{prefix}{os.getpid()}"
    master, agent, ctr = f"mac{tag}m", f"mac{tag}a", f"mac{tag}c"
    created: list[str] = []
    try:
        for ns in (master, agent, ctr):
            sh("ip", "netns", "add", ns)
            created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", f"{tag}m", "type", "veth", "peer", "name", f"{tag}a")
        sh("ip", "link", "set", f"{tag}m", "netns", master)
        sh("ip", "link", "set", f"{tag}a", "netns", agent)
        sh("ip", "link", "add", f"{tag}b", "type", "veth", "peer", "name", f"{tag}c")
        sh("ip", "link", "set", f"{tag}b", "netns", agent)
        sh("ip", "link", "set", f"{tag}c", "netns", ctr)
        for ns, dev, address in (
            (master, f"{tag}m", f"{MASTER_IP}/24"),
            (agent, f"{tag}a", f"{AGENT_IP}/24"),
            (agent, f"{tag}b", f"{AGENT_CTR_IP}/24"),
            (ctr, f"{tag}c", f"{CTR_IP}/24"),
        ):
            sh("ip", "-n", ns, "addr", "add", address, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ctr, "route", "add", "default", "via", AGENT_CTR_IP)
        sh("ip", "netns", "exec", agent, "sysctl", "-qw", "net.ipv4.ip_forward=0")
        port = str(SYS_EXPORTER.port)
        for chain in ("PREROUTING", "OUTPUT"):
            sh(
                "ip", "netns", "exec", agent, "iptables", "-t", "nat", "-A", chain,
                "-d", AGENT_IP, "-p", "tcp", "--dport", port,
                "-j", "DNAT", "--to-destination", f"{CTR_IP}:{port}",
            )  # fmt: skip
        yield {"master": master, "agent": agent, "ctr": ctr}
    finally:
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], check=False)


def http_code(ns: str, url: str) -> str:
    """The HTTP status curl gets for `url` from inside `ns` ("000" when nothing answers)."""
    done = subprocess.run(
        ["ip", "netns", "exec", ns, "curl", "-s", "-m", "2", "-o", "/dev/null", "-w",
         "%{http_code}", url],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip()


@contextmanager
def real_exporters(names: dict[str, str], log_dir: Path) -> Iterator[None]:
    """The real sys-exporter in ctr (behind the DNAT) and nic-exporter on the agent.

    Returns once both answer inside their namespaces (needs curl); stops them on exit.
    """
    children: list[subprocess.Popen] = []
    try:
        for ns, address, service in (
            (names["ctr"], CTR_IP, "sys-exporter"),
            (names["agent"], AGENT_IP, "nic-exporter"),
        ):
            command = [sys.executable, "-m", "exporters", service, "--bind", address]
            log = (log_dir / f"{service}.log").open("wb")
            children.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, *command],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                )
            )
        deadline = time.monotonic() + 30
        while not (
            http_code(names["ctr"], f"http://{CTR_IP}:29101/metrics") == "200"
            and http_code(names["agent"], f"http://{AGENT_IP}:29500/metrics") == "200"
        ):
            assert time.monotonic() < deadline, "the exporters did not start in the namespaces"
            time.sleep(0.2)
        yield
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
