"""testkit.docker_engine: what the engine of a killed run left is cleared before the
next engine starts, and a running engine is never touched.

The namespaces here hold addresses of their own (198.18.251.0/24), not the real
engine's, so that the Docker tests' engine, which may run beside them, is left alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from testkit import namespaces
from testkit.docker_engine import clear_stale_engines
from testkit.waiting import wait_for
from tests.conftest import netns_marks

pytestmark = netns_marks("ip", "unshare", "chroot", "ldd", slow=False)

HOST_SIDE, NODE_SIDE = "198.18.251.1", "198.18.251.2"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _has_address(address: str) -> bool:
    listed = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True)
    return f" {address}/" in listed.stdout


@pytest.fixture
def left_engine() -> Iterator[str]:
    """A namespace as a killed run's engine leaves it: veth, addresses, roots."""
    tag = f"s{os.getpid() % 100000}"
    name, host_end, node_end = f"macd{tag}", f"md{tag}h", f"md{tag}n"
    _ip("netns", "add", name)
    _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
    _ip("link", "set", node_end, "netns", name)
    _ip("addr", "add", f"{HOST_SIDE}/24", "dev", host_end)
    _ip("link", "set", host_end, "up")
    _ip("-n", name, "addr", "add", f"{NODE_SIDE}/24", "dev", node_end)
    _ip("-n", name, "link", "set", node_end, "up")
    roots = [Path(f"/run/macd-{tag}"), Path(f"/var/tmp/mac-dockerd-{tag}")]
    for root in roots:
        (root / "data").mkdir(parents=True, exist_ok=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
        namespaces.release(name)


def _in_namespace(name: str, program: str, tmp_path: Path) -> subprocess.Popen:
    """A process in namespace `name` whose command name is `program` (`ip netns exec`
    enters it, then runs the program in its place)."""
    copy = tmp_path / program
    shutil.copy(shutil.which("sleep") or "/bin/sleep", copy)
    process = subprocess.Popen(["ip", "netns", "exec", name, str(copy), "300"])
    comm = Path(f"/proc/{process.pid}/comm")
    wait_for(lambda: comm.read_text().strip() == program, 10, what=f"{program} in {name}")
    return process


def _container(data_root: Path) -> subprocess.Popen:
    """A process as a container's: in a mount namespace of its own, its root a mount of
    a folder under the engine's data root (with `sleep` and its libraries copied in)."""
    rootfs = data_root / "vfs" / "dir" / "c1"
    sleep = Path(shutil.which("sleep") or "/bin/sleep")
    libraries = subprocess.run(["ldd", str(sleep)], capture_output=True, text=True).stdout
    for path in [sleep, *(Path(word) for word in libraries.split() if word.startswith("/"))]:
        (rootfs / path.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, rootfs / path.relative_to("/"))
    script = f"mount --bind {rootfs} {rootfs} && cd {rootfs} && exec chroot . {sleep} 300"
    process = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    )
    comm = Path(f"/proc/{process.pid}/comm")
    wait_for(lambda: comm.read_text().strip() == "sleep", 10, what="the container's process")
    return process


def test_a_dead_engines_namespace_veth_roots_and_processes_are_cleared(left_engine, tmp_path):
    tag = left_engine.removeprefix("macd")
    shim = _in_namespace(left_engine, "containerd-shim", tmp_path)
    # Its container, in namespaces of its own: orphaned once the shim went.
    container = _container(Path(f"/var/tmp/mac-dockerd-{tag}") / "data")
    namespaces.claim(left_engine)
    (namespaces.CLAIMS / left_engine).write_text("1:1.00")  # made by a run long gone
    assert namespaces.veth_ends_into(left_engine) == [f"md{tag}h"]

    assert clear_stale_engines(ns_ip=NODE_SIDE) == [left_engine]

    assert shim.wait(timeout=10) != 0  # killed
    assert container.wait(timeout=10) != 0
    assert not Path(f"/run/netns/{left_engine}").exists()
    assert not _has_address(HOST_SIDE)  # the host's end went with the pair
    assert not Path(f"/run/macd-{tag}").exists()
    assert not Path(f"/var/tmp/mac-dockerd-{tag}").exists()
    assert not namespaces.owner(left_engine)


def test_an_engine_of_another_process_is_left_alone_while_its_dockerd_is_away(
    left_engine, tmp_path
):
    """Between its namespace and its dockerd, or during a restart, no dockerd runs in a
    live engine's namespace: the claim of the process that made it says whose it is."""
    run = subprocess.Popen(["sleep", "120"])  # another test process, still running
    try:
        mark = f"{run.pid}:{psutil.Process(run.pid).create_time():.2f}"
        namespaces.claim(left_engine)
        (namespaces.CLAIMS / left_engine).write_text(mark)
        with pytest.raises(namespaces.HeldByALiveRun) as refused:
            clear_stale_engines(ns_ip=NODE_SIDE)
        assert f"{left_engine}, of the test process of pid {run.pid} (still running)" in str(
            refused.value
        )
        assert Path(f"/run/netns/{left_engine}").exists() and _has_address(HOST_SIDE)
    finally:
        run.kill()
        run.wait()


def test_an_engine_still_running_is_left_alone_and_named(left_engine, tmp_path):
    dockerd = _in_namespace(left_engine, "dockerd", tmp_path)
    try:
        with pytest.raises(namespaces.HeldByALiveRun) as refused:
            clear_stale_engines(ns_ip=NODE_SIDE)
        assert f"runs in network namespace {left_engine}" in str(refused.value)
        assert f"kill {dockerd.pid}" in str(refused.value)
        assert dockerd.poll() is None
        assert Path(f"/run/netns/{left_engine}").exists()
        assert _has_address(HOST_SIDE)
    finally:
        dockerd.kill()
        dockerd.wait()


def test_namespaces_of_other_addresses_are_not_ours_to_clear(left_engine):
    assert clear_stale_engines(ns_ip="198.18.251.99") == []
    assert Path(f"/run/netns/{left_engine}").exists()
