"""The Slurm lab is hermetic: it lives in its folder, and stop() leaves nothing running.

(What the lab runs is tested where it is used: tests/scheduler/slurm/test_client.py.)
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from testkit.ports import listening_port
from testkit.slurmlab import (
    DAEMON_MARKER,
    JOB_MARKER,
    LAB_USERS,
    SlurmLab,
    SlurmLabError,
    SlurmLabUnavailable,
    ensure_users,
    lab_folder,
)
from testkit.slurmlab import lab as lab_module

pytestmark = [pytest.mark.slurm]
# Where a Slurm or munge installed from Debian keeps its own state: the lab never writes there.
SYSTEM_PATHS = [
    Path(path)
    for path in ("/etc/slurm", "/etc/munge", "/var/spool/slurmctld", "/var/spool/slurmd",
                 "/var/log/slurm", "/var/log/munge", "/run/munge", "/var/lib/munge",
                 "/run/slurm", "/var/run/slurm")
]  # fmt: skip


def start(root: Path, **kwargs) -> SlurmLab:
    try:
        return SlurmLab.start(root, **kwargs)
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))


def snapshot() -> dict[str, tuple[int, float]]:
    """Every file under the system's Slurm and munge folders, with size and mtime."""
    seen = {}
    for top in SYSTEM_PATHS:
        for path in [top, *top.rglob("*")] if top.exists() else []:
            info = path.lstat()
            seen[str(path)] = (info.st_size, info.st_mtime)
    return seen


def processes_of(root: Path) -> list[str]:
    """The processes that carry the lab's marker or name its folder on their command line."""
    found = []
    markers = {f"{DAEMON_MARKER}={root}".encode(), f"{JOB_MARKER}={root}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except (OSError, IndexError):
            continue
        if markers & environ or str(root).encode() in cmdline:
            found.append(f"{entry.name}: {cmdline.decode(errors='replace')}")
    return found


def databases() -> set[str]:
    out = subprocess.run(
        ["mariadb", "-u", "root", "-N", "-e", "SHOW DATABASES"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    return set(out.split())


def test_stop_leaves_no_process_no_database_and_nothing_outside_the_folder():
    try:
        alice, _ = ensure_users()
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))
    before = snapshot()
    with lab_folder() as root:
        lab = start(root, nodes=["node-1", "node-2"], gpus_per_node=2, accounting=True)
        try:
            assert processes_of(root)
            assert lab.accounting_database in databases()
            running = lab.submit(gpus=2, node="node-1", user=alice, seconds=600)
            lab.wait_job(running, "RUNNING")
            # a slurmd the lab did not start itself: the reboot program's
            lab.scontrol("reboot", "ASAP", "nextstate=RESUME", "reason=test", "node-2")
            # The program, slurmd's restart and its registration: seconds alone, more than
            # 30 s once (2026-12-05) beside the Docker tests on 2 busy cores.
            lab.wait_nodes("idle", nodes=["node-2"], timeout=120)
            assert len(lab.reboots("node-2")) == 1
        finally:
            lab.stop()
        assert processes_of(root) == []
        assert lab.accounting_database not in databases()
        lab.stop()  # a second stop is harmless
    assert snapshot() == before


def test_a_folder_too_long_for_unix_sockets_is_refused_before_anything_starts(tmp_path):
    root = tmp_path / ("x" * 80)
    with pytest.raises(ValueError, match="too long for the unix sockets"):
        SlurmLab.start(root, nodes=["node-1"])
    assert not root.exists()


def test_a_job_of_another_user_needs_a_folder_that_user_can_cross(tmp_path_factory):
    """pytest's own folders are 0700: the lab says so instead of a job failing with 13."""
    try:
        ensure_users()
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("slurm")
    closed = next(f for f in reversed(root.parents) if not os.stat(f).st_mode & 0o001)
    with start(root, nodes=["node-1"], gpus_per_node=1) as lab:
        with pytest.raises(SlurmLabError, match=f"{closed} is closed to others"):
            lab.submit(user=LAB_USERS[0], seconds=1)
        assert lab.submit(seconds=1) > 0  # root's jobs run anywhere


def test_a_port_taken_by_someone_else_makes_the_lab_try_again(tmp_path_factory, monkeypatch):
    """Another program can bind a chosen port before the lab's slurmd does: start()
    sees slurmd's "Address already in use" and starts over on other ports."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    handed = []

    def first_one_taken(host="127.0.0.1", taken=None):
        port = squatter.getsockname()[1] if not handed else listening_port(host, taken)
        handed.append(port)
        return port

    monkeypatch.setattr(lab_module, "listening_port", first_one_taken)
    # A short folder: slurmd's sockets go under it (this test's own name is long).
    folder = tmp_path_factory.mktemp("slurm")
    with squatter, start(folder, nodes=["node-1"], gpus_per_node=1) as lab:
        assert lab.node_states() == {"node-1": "idle"}
        assert lab.nodes[0].port != squatter.getsockname()[1]
