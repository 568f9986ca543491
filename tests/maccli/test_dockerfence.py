"""MAC's rules in Docker's DOCKER-USER chain, with the real iptables in a namespace of its own.

The namespace has what a host with Docker has, DOCKER-USER in its nft tables, and
legacy tables beside them with the chain too (an engine that once ran on
iptables-legacy), plus a rule of the administrator's. Whether the rules keep a
neighbour out for real is tests/docker/test_front_door.py's, on the real engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence

import pytest

from maccli.runtimes import dockerfence
from node.runner import CommandResult, run_command

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="iptables in a network namespace needs root"),
    pytest.mark.skipif(
        not (shutil.which("iptables-nft") and shutil.which("iptables-legacy")),
        reason="Debian's iptables (iptables-nft and iptables-legacy) is needed",
    ),
]
ADMINS = ["-s", "198.18.77.0/24", "-j", "RETURN"]


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"macfence{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for backend in ("iptables-nft", "iptables-legacy"):
            inside = ["ip", "netns", "exec", name, backend, "-w"]
            subprocess.run([*inside, "-N", "DOCKER-USER"], check=True)
            subprocess.run([*inside, "-A", "DOCKER-USER", *ADMINS], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def runner(namespace: str):
    def run(argv: Sequence[str]) -> CommandResult:
        return run_command(["ip", "netns", "exec", namespace, *argv])

    return run


def chain(namespace: str, backend: str) -> list[str]:
    listed = runner(namespace)([backend, "-w", "-S", "DOCKER-USER"])
    return [line for line in listed.stdout.splitlines() if line.startswith("-A")]


def test_it_puts_its_rules_first_in_every_backend_once_however_often_it_runs(namespace):
    run = runner(namespace)
    first = dockerfence.install_for_bridge("br-0123456789ab", run)
    again = dockerfence.install_for_bridge("br-0123456789ab", run)

    assert first.problem == again.problem == ""
    assert again.backends == ["iptables-nft", "iptables-legacy"]
    for backend in again.backends:
        rules = chain(namespace, backend)
        assert len(rules) == 5, rules
        assert all(dockerfence.COMMENT in rule for rule in rules[:4]), rules
        assert rules[3].endswith("-j DROP") and "-o br-0123456789ab" in rules[3]
        assert "--ctstate DNAT" in rules[1]
        assert rules[4] == "-A DOCKER-USER -s 198.18.77.0/24 -j RETURN"  # the admin's
    assert dockerfence.installed(run) == {"iptables-nft": 4, "iptables-legacy": 4}


def test_a_new_bridge_replaces_the_rules_of_the_old_one(namespace):
    run = runner(namespace)
    dockerfence.install_for_bridge("br-0123456789ab", run)
    dockerfence.install_for_bridge("br-ba9876543210", run)
    rules = chain(namespace, "iptables-nft")
    assert not any("br-0123456789ab" in rule for rule in rules)
    assert sum("br-ba9876543210" in rule for rule in rules) == 4


def test_stop_takes_out_only_its_own_rules(namespace):
    run = runner(namespace)
    dockerfence.install_for_bridge("br-0123456789ab", run)

    removed = dockerfence.remove(run)

    assert removed.problem == "" and removed.backends == ["iptables-nft", "iptables-legacy"]
    for backend in removed.backends:
        assert chain(namespace, backend) == ["-A DOCKER-USER -s 198.18.77.0/24 -j RETURN"]
    assert dockerfence.remove(run).backends == []  # nothing left to remove


def test_without_dockers_chain_it_says_so(namespace):
    run = runner(namespace)
    for backend in ("iptables-nft", "iptables-legacy"):
        run([backend, "-w", "-F", "DOCKER-USER"])
        run([backend, "-w", "-X", "DOCKER-USER"])
    fence = dockerfence.install_for_bridge("br-0123456789ab", run)
    assert fence.problem == "no iptables table holds Docker's DOCKER-USER chain"
    assert "not installed" in dockerfence.describe(fence, "mac_master")


class _Restoring:
    """Docker at boot: the network answers `docker network inspect` after a while."""

    def __init__(self, namespace: str, after: int) -> None:
        self.inside = runner(namespace)
        self.after = after

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        if list(argv[:3]) != ["docker", "network", "inspect"]:
            return self.inside(argv)
        self.after -= 1
        if self.after > 0:
            return CommandResult(1, "", "Error: No such network: mac_master\n")
        row = {"Id": "0123456789abcdef", "Options": {"com.docker.network.bridge.name": "br-mac"}}
        return CommandResult(0, json.dumps([row]))


def test_the_boot_command_waits_for_docker_to_restore_the_network(namespace, capsys):
    code = dockerfence.main(["install", "mac_master", "--wait", "20"], _Restoring(namespace, 3))
    assert code == 0
    assert "MAC's rules in DOCKER-USER" in capsys.readouterr().out
    for backend in ("iptables-nft", "iptables-legacy"):
        rules = chain(namespace, backend)
        assert sum("-o br-mac" in rule for rule in rules) == 4, rules
        assert rules[-1].endswith(" ".join(ADMINS))  # the administrator's stays


def test_the_boot_command_fails_when_the_network_never_comes(namespace, capsys):
    code = dockerfence.main(["install", "mac_master", "--wait", "1"], _Restoring(namespace, 99))
    assert code == 1
    assert "the network mac_master was not found" in capsys.readouterr().out
    assert dockerfence.installed(runner(namespace)) == {"iptables-nft": 0, "iptables-legacy": 0}


def test_the_boot_command_waits_for_dockers_chain_too(namespace, capsys):
    """At boot dockerd may answer before it made DOCKER-USER: the command waits for it."""
    for backend in ("iptables-nft", "iptables-legacy"):  # as before dockerd's start
        inside = ["ip", "netns", "exec", namespace, backend, "-w"]
        subprocess.run([*inside, "-F", "DOCKER-USER"], check=True)
        subprocess.run([*inside, "-X", "DOCKER-USER"], check=True)
    inner = _Restoring(namespace, 1)
    calls = {"n": 0}

    def run(argv: Sequence[str]) -> CommandResult:
        calls["n"] += 1
        if calls["n"] == 6:  # dockerd makes its chain meanwhile
            for backend in ("iptables-nft", "iptables-legacy"):
                inner([backend, "-w", "-N", "DOCKER-USER"])
        return inner(argv)

    assert dockerfence.main(["install", "mac_master", "--wait", "20"], run) == 0
    assert dockerfence.installed(runner(namespace)) == {"iptables-nft": 4, "iptables-legacy": 4}
