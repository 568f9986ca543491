"""SlurmClient runs each release's command for nodes, and reads what that release printed.

The tools are played back from tests/fixtures/slurm/<release>/ (testkit.slurmlab.replay):
a command line the capture does not hold fails with "no capture", so these tests also
pin the command lines. test_client.py runs the client against a live 22.05 cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scheduler.slurm import SlurmClient, SlurmOutputError, SlurmUnknownNode, SlurmUnreachable
from testkit.slurmlab.replay import install_tools

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


def client_of(release: str, folder: Path, *, down: bool = False) -> SlurmClient:
    tools = install_tools(FIXTURES / release, folder / "bin", down=down)
    return SlurmClient(environ={**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"})


@pytest.mark.parametrize(("release", "version"), [("22.05", (22, 5)), ("24.11", (24, 11))])
def test_every_node_is_read_with_the_command_of_the_release(release, version, tmp_path):
    client = client_of(release, tmp_path)
    assert client.release == version
    nodes = {node.name: node for node in client.nodes()}
    assert sorted(nodes) == [f"node-{index}" for index in range(1, 9)]
    assert nodes["node-5"].partitions == ("hidden",) and nodes["node-2"].drained


@pytest.mark.parametrize(
    ("release", "command"),
    [
        ("22.05", ("sinfo", "--all", "--json")),  # no JSON of one node: the whole table
        ("24.11", ("scontrol", "--all", "--json", "show", "node", "node-99")),
    ],
)
def test_one_node_is_read_and_an_unknown_one_is_said_unknown(release, command, tmp_path):
    client = client_of(release, tmp_path)
    node = client.node("node-2")
    assert node.drained and node.reason == "MAC: GPU 3 XID 79; reboot"
    with pytest.raises(SlurmUnknownNode, match="Slurm has no node named 'node-99'") as raised:
        client.node("node-99")
    assert raised.value.command == command


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_jobs_include_those_just_finished_and_those_of_hidden_partitions(release, tmp_path):
    jobs = {job.job_id: job for job in client_of(release, tmp_path).jobs()}
    assert jobs[1].state == "COMPLETED" and jobs[2].state == "FAILED"
    assert jobs[6].partition == "hidden" and jobs[6].gpu_indexes("node-5") == (0, 1, 2, 3)


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_reservations_are_read(release, tmp_path):
    (reservation,) = client_of(release, tmp_path).reservations()
    assert reservation.name == "maint-rack2" and reservation.nodes == ("node-3",)


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_a_stopped_controller_is_unreachable_for_nodes_and_jobs(release, tmp_path):
    client = client_of(release, tmp_path, down=True)
    said = r"is DOWN|Unable to contact slurm controller"  # 22.05: the ping after errors
    with pytest.raises(SlurmUnreachable, match=said) as raised:
        client.nodes()
    assert raised.value.command[0] == ("sinfo" if release == "22.05" else "scontrol")
    with pytest.raises(SlurmUnreachable, match=said):
        client.jobs()


def test_a_document_without_nodes_is_an_output_error_not_every_node_unknown(tmp_path):
    """A 23.02+ tool answering `{"nodes": []}` for the whole cluster: misread, not empty."""
    capture = tmp_path / "capture"
    capture.mkdir()
    for name in ("version.txt", "commands.tsv"):
        (capture / name).write_text((FIXTURES / "24.11" / name).read_text())
    (capture / "scontrol-nodes.json").write_text('{"nodes": [], "errors": [], "warnings": []}')
    client = SlurmClient(
        environ={**os.environ, "PATH": f"{install_tools(capture, tmp_path / 'bin')}:/usr/bin"}
    )
    with pytest.raises(SlurmOutputError, match="Slurm listed no nodes"):
        client.nodes()
