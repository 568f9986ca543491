"""Which test run made a network namespace, and what a killed run left of its own.

A test that joins a namespace to this host by a veth puts a fixed test address on the
host's end (198.18.250.1 for the Docker engine, 198.18.22.1 for the other host). A run
killed outright (SIGKILL, a CI timeout) deletes neither, and the next run's veth then
holds the same subnet beside the dead one: the host's route may go through the dead
link, and every test across it times out with nothing to say why. So each such
namespace is claimed by the process that made it (its pid and start time, as
testkit.leftovers marks a run, in a file under /run), and before a namespace is made,
one of the same family is removed where that process is gone (or is this one: a
teardown of its that failed), or named where it still runs (another xdist worker,
another checkout's run).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import psutil

from testkit.leftovers import run_is_alive

CLAIMS = Path("/run/mac-test-netns")


class HeldByALiveRun(RuntimeError):
    """A namespace of another test process, still running, holds the address a new one
    needs."""


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False).stdout


def this_process() -> str:
    """This process as a claim names it: "pid:start time"."""
    me = psutil.Process()
    return f"{me.pid}:{me.create_time():.2f}"


def claim(netns: str) -> None:
    """Record that this process made `netns`."""
    CLAIMS.mkdir(parents=True, exist_ok=True)
    (CLAIMS / netns).write_text(this_process())


def release(netns: str) -> None:
    (CLAIMS / netns).unlink(missing_ok=True)


def owner(netns: str) -> str:
    """The process that made `netns` ("pid:start time"), "" where none was recorded."""
    try:
        return (CLAIMS / netns).read_text().strip()
    except OSError:
        return ""


def another_process_owns(netns: str) -> bool:
    """Whether `netns` is another process's, still running: never one of this process's
    own (a teardown that failed earlier)."""
    mark = owner(netns)
    return bool(mark) and mark != this_process() and run_is_alive(mark)


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
    if another_process_owns(netns):
        raise HeldByALiveRun(
            f"network namespace {netns}, of the test process of pid "
            f"{owner(netns).partition(':')[0]} (still running), holds {address}: let its "
            f"run end, or stop it and then `ip netns del {netns}`"
        )


def clear_left_behind(prefix: str, address: str) -> list[str]:
    """Namespaces named `prefix`... whose process is gone (or is this one): removed, with
    their veths, whatever they hold (a run killed while it made one leaves its host end
    with the address and the namespace without it). One of another process still running
    that holds `address` (their side of the pair): HeldByALiveRun; one without it is left
    alone. For namespaces where nothing runs; the Docker engine's own clears its
    processes first (testkit.docker_engine.clear_stale_engines)."""
    removed = []
    for netns in named(prefix):
        if another_process_owns(netns):
            if holds(netns, address):
                refuse_if_alive(netns, address)
            continue
        remove(netns)
        removed.append(netns)
    return removed
