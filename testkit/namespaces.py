"""Which test run made a network namespace, and what a killed run left of its own.

A test that joins a namespace to this host by a veth puts a fixed test address on the
host's end (198.18.250.1 for the Docker engine, 198.18.22.1 for the other host). A run
killed outright (SIGKILL, a CI timeout) deletes neither, and the next run's veth then
holds the same subnet beside the dead one: the host's route may go through the dead
link, and every test across it times out with nothing to say why. So each such
namespace is claimed for its run (the run's mark, testkit.leftovers, in a file under
/run), and before a namespace is made, one of the same family still holding the
address is removed where its run is gone, or named where its run still goes.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from testkit.leftovers import mark_this_run, run_is_alive

CLAIMS = Path("/run/mac-test-netns")


class HeldByALiveRun(RuntimeError):
    """A namespace of a run still going holds the address a new one needs."""


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False).stdout


def claim(netns: str) -> None:
    """Record that this run made `netns`."""
    CLAIMS.mkdir(parents=True, exist_ok=True)
    (CLAIMS / netns).write_text(mark_this_run())


def release(netns: str) -> None:
    (CLAIMS / netns).unlink(missing_ok=True)


def owner(netns: str) -> str:
    """The mark of the run that made `netns`, "" where none was recorded."""
    try:
        return (CLAIMS / netns).read_text().strip()
    except OSError:
        return ""


def another_runs(netns: str) -> bool:
    """Whether `netns` is another run's, still going. One of this run's own (a teardown
    that failed earlier) is not: the tests that make a family of namespaces make them one
    at a time."""
    mark = owner(netns)
    return bool(mark) and mark != mark_this_run() and run_is_alive(mark)


def named(prefix: str) -> list[str]:
    """The namespaces whose names start with `prefix`."""
    return [
        line.split()[0] for line in _ip("netns", "list").splitlines() if line.startswith(prefix)
    ]


def holds(netns: str, address: str) -> bool:
    """Whether an interface in `netns` has IPv4 `address`."""
    return f" {address}/" in _ip("-n", netns, "-o", "-4", "addr", "show")


def veth_ends_into(netns: str) -> list[str]:
    """The host's veth links whose peer is in namespace `netns`."""
    return [
        line.split(":")[1].strip().split("@")[0]
        for line in _ip("-o", "link", "show", "type", "veth").splitlines()
        if re.search(rf"\blink-netns {re.escape(netns)}(\s|$)", line)
    ]


def remove(netns: str) -> None:
    """The namespace, its veth pairs (the host's end first: a pair goes as one, whoever
    still holds the namespace) and its claim."""
    for host_end in veth_ends_into(netns):
        _ip("link", "del", host_end)
    _ip("netns", "del", netns)
    release(netns)


def refuse_if_alive(netns: str, address: str) -> None:
    if another_runs(netns):
        raise HeldByALiveRun(
            f"network namespace {netns}, of the test run of pid "
            f"{owner(netns).partition(':')[0]} (still going), holds {address}: let that "
            f"run end, or stop it and then `ip netns del {netns}`"
        )


def clear_left_behind(prefix: str, address: str) -> list[str]:
    """Namespaces named `prefix`... whose run is gone (or is this one): removed, with
    their veths, whatever they hold (a run killed while it made one leaves its host end
    with the address and the namespace without it). One of another run still going that
    holds `address` (their side of the pair): HeldByALiveRun. For namespaces where
    nothing runs; the Docker engine's own clears its processes first
    (testkit.docker_engine.clear_stale_engines)."""
    removed = []
    for netns in named(prefix):
        if another_runs(netns):
            if holds(netns, address):
                refuse_if_alive(netns, address)
            continue
        remove(netns)
        removed.append(netns)
    return removed
