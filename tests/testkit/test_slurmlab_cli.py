"""`python -m testkit.slurmlab`: the demo's lab, named after a simulated fleet's GPU nodes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.ports import check_contract_ports
from testkit.simfleet import loopback_base, node_addresses
from testkit.slurmlab import check_can_run, lab_folder
from testkit.slurmlab.cli import fleet_node_names
from testkit.slurmlab.processes import DAEMON_MARKER

ROOT = Path(__file__).resolve().parents[2]


def marked(root: Path) -> list[int]:
    """Processes that still carry the lab's marker."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if f"{DAEMON_MARKER}={root}".encode() in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


def test_the_names_are_those_of_the_gpu_nodes_the_simulated_fleet_serves(fleet):
    base = loopback_base()
    running = fleet(10, base=base, profiles="nvidia=1,cpu=1", fault_rate=0)
    gpu_nodes = [node.hostname for node in running.nodes if node.hardware.profile.gpu_count]
    assert len(gpu_nodes) == 5
    assert fleet_node_names(10, base, "nvidia=1,cpu=1", 3) == gpu_nodes[:3]


@pytest.mark.slurm
def test_it_runs_in_the_foreground_and_stops_everything_on_sigterm():
    try:
        check_can_run()
    except Exception as exc:
        pytest.skip(str(exc))
    check_contract_ports(node_addresses(10, "127.100.0.0"))  # its fleet's
    with lab_folder() as root:
        child = subprocess.Popen(
            [sys.executable, "-m", "testkit.slurmlab", "--root", str(root),
             "--simulated-fleet", "10", "--base", "127.100.0.0", "--profiles", "nvidia=1,cpu=1",
             "--max-nodes", "3"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            lines = []
            for line in child.stdout:
                lines.append(line.strip())
                if line.strip() == "READY":
                    break
            conf = root / "etc" / "slurm.conf"
            assert f"SLURM_CONF={conf}" in lines, lines
            sinfo = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N"], env={**os.environ, "SLURM_CONF": str(conf)},
                capture_output=True, text=True, timeout=30, check=True,
            )  # fmt: skip
            assert sinfo.stdout.split() == fleet_node_names(10, "127.100.0.0", "nvidia=1,cpu=1", 3)
        finally:
            child.send_signal(signal.SIGTERM)
            rest = child.communicate(timeout=60)[0]
        assert child.returncode == 0 and "Slurm lab stopped." in rest
        assert marked(root) == []


def test_without_root_or_with_a_bad_fleet_it_says_why(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "testkit.slurmlab", "--root", str(tmp_path),
         "--simulated-fleet", "5", "--profiles", "cpu=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "the simulated fleet of 5 has no GPU node" in done.stderr
