"""testkit.namespaces: a namespace a killed run left holding a test address is removed
before a new one takes that address; one of another test process still running (another
xdist worker, another checkout's run) is named, never touched.

The namespaces here have names and addresses of their own (198.18.253.0/24), so the
suite's other namespaces are left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from testkit import namespaces
from tests.conftest import netns_marks

pytestmark = netns_marks("ip", slow=False)

PREFIX = f"macnst{os.getpid() % 100000}"
HOST_SIDE, NODE_SIDE = "198.18.253.1", "198.18.253.2"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def another_run() -> Iterator[str]:
    """The claim of another test process, still running."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield f"{process.pid}:{psutil.Process(process.pid).create_time():.2f}"
    finally:
        process.kill()
        process.wait()


def _host_has(address: str) -> bool:
    listed = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True)
    return f" {address}/" in listed.stdout


@pytest.fixture
def left() -> Iterator[str]:
    """A namespace joined to the host by a veth, as a test makes it and a killed run
    leaves it."""
    name = f"{PREFIX}a"
    _ip("netns", "add", name)
    _ip("link", "add", f"{PREFIX}h", "type", "veth", "peer", "name", f"{PREFIX}n")
    _ip("link", "set", f"{PREFIX}n", "netns", name)
    _ip("addr", "add", f"{HOST_SIDE}/24", "dev", f"{PREFIX}h")
    _ip("-n", name, "addr", "add", f"{NODE_SIDE}/24", "dev", f"{PREFIX}n")
    try:
        yield name
    finally:
        subprocess.run(["ip", "link", "del", f"{PREFIX}h"], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        namespaces.release(name)


def test_a_gone_runs_namespace_goes_with_its_veth_and_claim(left):
    namespaces.claim(left)
    (namespaces.CLAIMS / left).write_text("1:1.00")  # a run long gone
    assert namespaces.veth_ends_into(left) == [f"{PREFIX}h"]

    assert namespaces.clear_left_behind(PREFIX, NODE_SIDE) == [left]

    assert left not in namespaces.named(PREFIX)
    assert not _host_has(HOST_SIDE)
    assert namespaces.owner(left) == ""


def test_one_no_run_claimed_goes_too(left):
    """Made before runs claimed theirs, or by hand with the test's names."""
    assert namespaces.clear_left_behind(PREFIX, NODE_SIDE) == [left]
    assert not _host_has(HOST_SIDE)


def test_one_of_another_process_still_running_is_named_and_left(left, another_run):
    namespaces.claim(left)
    (namespaces.CLAIMS / left).write_text(another_run)
    with pytest.raises(namespaces.HeldByALiveRun) as refused:
        namespaces.clear_left_behind(PREFIX, NODE_SIDE)
    theirs = another_run.partition(":")[0]
    assert str(refused.value).startswith(
        f"network namespace {left}, of the test process of pid {theirs} (still running), holds "
        f"{NODE_SIDE}"
    )
    assert left in namespaces.named(PREFIX) and _host_has(HOST_SIDE)


def test_one_this_process_left_earlier_goes(left):
    """A teardown of this process that failed earlier."""
    namespaces.claim(left)
    assert namespaces.clear_left_behind(PREFIX, NODE_SIDE) == [left]
    assert not _host_has(HOST_SIDE)


def test_one_left_half_made_goes_with_the_address_its_host_end_holds(left):
    """Killed between the host's address and the namespace's: it holds none itself."""
    _ip("-n", left, "addr", "del", f"{NODE_SIDE}/24", "dev", f"{PREFIX}n")
    namespaces.claim(left)
    (namespaces.CLAIMS / left).write_text("1:1.00")
    assert namespaces.clear_left_behind(PREFIX, NODE_SIDE) == [left]
    assert not _host_has(HOST_SIDE)


def test_others_are_not_its_to_clear(left, another_run):
    namespaces.claim(left)
    (namespaces.CLAIMS / left).write_text(another_run)
    # another run's, without the address asked for: left alone, said nothing of
    assert namespaces.clear_left_behind(PREFIX, "198.18.253.99") == []
    assert namespaces.clear_left_behind(f"{PREFIX}x", NODE_SIDE) == []  # another family
    assert left in namespaces.named(PREFIX)
