"""MAC's own isolation of the master's Compose network under Docker: rules in DOCKER-USER.

Why (issue 31): only mac-proxy publishes a port, yet the other containers of the master
network (the api-server's own 28080, Redis, Prometheus, Alertmanager) listen on their
container addresses, and a neighbour that routes that network through the master can
reach them. What stopped it was Docker's FORWARD policy, DROP, which dockerd sets only
when it turns IPv4 forwarding on itself. Where forwarding was on already (another
engine ran here before, a router, Kubernetes; a new network namespace inherits the
host's setting) dockerd leaves the policy as it finds it, often ACCEPT, and leftover
ACCEPT rules of an earlier engine stay in FORWARD: the isolation depended on what ran
before. Docker leaves its DOCKER-USER chain to the administrator and sends every
forwarded packet through it first, so MAC keeps its isolation there, in four rules
marked with its comment (BR is the master network's bridge):

    -o BR -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN   answers to the containers
    -o BR -m conntrack --ctstate DNAT -j RETURN                  published ports (the proxy)
    -i BR -o BR -j RETURN                                         container to container
    -o BR -j DROP                                                 anything else, from anywhere

RETURN hands a packet back to Docker's own chains, which decide as they always do.
Every iptables backend whose tables hold a DOCKER-USER chain gets the rules: a host can
have nft and legacy tables side by side, both see every packet, and a DROP in either
drops it. `mac start master` installs them (removing MAC's old ones first: the bridge
changes when Compose recreates the network), `mac stop master` removes them, and what
the administrator put in DOCKER-USER is never touched. Rules do not outlive a reboot,
while Docker restarts the containers by itself: where systemd runs, `mac start master`
also enables mac-master-isolation.service (maccli.systemd), which runs

    python -m maccli.runtimes.dockerfence install mac_master

after docker.service at each boot (docs/security.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field

from node.runner import Runner, run_command

CHAIN = "DOCKER-USER"
COMMENT = "mac-master-isolation"
# The backends a host may have, each with its own tables; `iptables` is whichever the
# host's alternatives name (a distribution without iptables-nft/-legacy names).
BACKENDS = ("iptables-nft", "iptables-legacy", "iptables")


@dataclass
class Fence:
    """What installing or removing the rules did: per backend, or why nothing was done."""

    bridge: str = ""
    backends: list[str] = field(default_factory=list)
    problem: str = ""
    # Docker has not made the network or its chain yet (at boot: worth waiting for).
    early: bool = False


def rules(bridge: str) -> list[list[str]]:
    """MAC's rules for the master network's bridge, in order (see the module docstring)."""
    mark = ["-m", "comment", "--comment", COMMENT]
    return [
        [
            "-o",
            bridge,
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            *mark,
            "-j",
            "RETURN",
        ],
        ["-o", bridge, "-m", "conntrack", "--ctstate", "DNAT", *mark, "-j", "RETURN"],
        ["-i", bridge, "-o", bridge, *mark, "-j", "RETURN"],
        ["-o", bridge, *mark, "-j", "DROP"],
    ]


def bridge_of(network: str, run: Runner = run_command) -> str:
    """The Linux bridge of a Docker network: its own name option, else br-<id[:12]>."""
    inspected = run(["docker", "network", "inspect", network])
    if inspected.returncode != 0:
        return ""
    try:
        [row] = json.loads(inspected.stdout or "[]")
    except ValueError:
        return ""
    named = (row.get("Options") or {}).get("com.docker.network.bridge.name")
    return named or f"br-{row.get('Id', '')[:12]}"


def engine_is_remote() -> bool:
    """DOCKER_HOST names another machine's engine: its tables are not this host's."""
    host = os.environ.get("DOCKER_HOST", "")
    return bool(host) and not host.startswith("unix://")


def backends_with_chain(run: Runner = run_command) -> list[str]:
    """The backends whose tables hold DOCKER-USER (each seen once: `iptables` is one of
    the others where both exist)."""
    found, seen = [], set()
    for backend in BACKENDS:
        listed = run([backend, "-w", "-S", CHAIN])
        if listed.returncode != 0:
            continue
        version = run([backend, "--version"]).stdout.strip()
        kind = "legacy" if "legacy" in version else "nf_tables"
        if kind not in seen:
            seen.add(kind)
            found.append(backend)
    return found


def _ours(backend: str, run: Runner) -> list[list[str]]:
    """MAC's rules as the backend lists them (`-A DOCKER-USER ...` split into words)."""
    listed = run([backend, "-w", "-S", CHAIN])
    lines = listed.stdout.splitlines() if listed.returncode == 0 else []
    return [line.split() for line in lines if COMMENT in line]


def _remove_ours(backend: str, run: Runner) -> str:
    for words in _ours(backend, run):
        deleted = run([backend, "-w", "-D", *words[1:]])
        if deleted.returncode != 0:
            return deleted.stderr.strip() or f"{backend} -D failed"
    return ""


def install(network: str, run: Runner = run_command) -> Fence:
    """MAC's rules for `network` (the master's Compose network) in every backend."""
    if engine_is_remote():
        return Fence(problem="the Docker engine is on another machine (DOCKER_HOST)")
    bridge = bridge_of(network, run)
    if not bridge:
        return Fence(problem=f"the network {network} was not found", early=True)
    return install_for_bridge(bridge, run)


def install_for_bridge(bridge: str, run: Runner = run_command) -> Fence:
    """MAC's rules for the bridge `bridge`, replacing MAC's earlier ones."""
    backends = backends_with_chain(run)
    if not backends:
        return Fence(bridge, problem=f"no iptables table holds Docker's {CHAIN} chain", early=True)
    for backend in backends:
        problem = _remove_ours(backend, run)
        for position, rule in enumerate(rules(bridge), start=1):
            if problem:
                break
            added = run([backend, "-w", "-I", CHAIN, str(position), *rule])
            if added.returncode != 0:
                problem = added.stderr.strip() or f"{backend} -I failed"
        if problem:
            return Fence(bridge, problem=f"{backend}: {problem}")
    return Fence(bridge, backends)


def remove(run: Runner = run_command) -> Fence:
    """Take MAC's rules out of every backend; the administrator's stay."""
    if engine_is_remote():
        return Fence(problem="the Docker engine is on another machine (DOCKER_HOST)")
    removed = []
    for backend in backends_with_chain(run):
        if _ours(backend, run):
            problem = _remove_ours(backend, run)
            if problem:
                return Fence(problem=f"{backend}: {problem}")
            removed.append(backend)
    return Fence(backends=removed)


def installed(run: Runner = run_command) -> dict[str, int]:
    """{backend: how many of MAC's rules it holds}, for every backend with the chain."""
    return {backend: len(_ours(backend, run)) for backend in backends_with_chain(run)}


def describe(fence: Fence, network: str) -> str:
    """What `mac start master` says of it."""
    if fence.problem:
        return f"other hosts' isolation of {network} not installed: {fence.problem}"
    return (
        f"Isolation:   other hosts reach only the published ports of {network} "
        f"({fence.bridge}): MAC's rules in {CHAIN} ({', '.join(fence.backends)})"
    )


def boot_command(network: str) -> list[str]:
    """What mac-master-isolation.service runs at boot: this module, with this Python."""
    return [sys.executable, "-m", "maccli.runtimes.dockerfence", "install", network]


def main(argv: list[str] | None = None, run: Runner = run_command) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m maccli.runtimes.dockerfence",
        description="Put MAC's DOCKER-USER rules for the master network in, or take them out.",
    )
    ap.add_argument("action", choices=("install", "remove"))
    ap.add_argument("network", nargs="?", default="mac_master", help="default: mac_master")
    ap.add_argument(
        "--wait", type=float, default=60.0,
        help="seconds to wait for Docker to restore the network at boot (default 60)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.action == "remove":
        fence = remove(run)
        print(fence.problem or f"removed MAC's rules from {', '.join(fence.backends) or 'none'}")
        return 1 if fence.problem else 0
    deadline = time.monotonic() + args.wait
    fence = install(args.network, run)
    # At boot dockerd may not have restored the network, or made its chain, yet.
    while fence.early and time.monotonic() < deadline:
        time.sleep(1.0)
        fence = install(args.network, run)
    print(describe(fence, args.network))
    return 1 if fence.problem else 0


if __name__ == "__main__":
    sys.exit(main())
