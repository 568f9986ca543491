"""The parsers read what Slurm 22.05's and 24.11's tools really print, alike.

tests/fixtures/slurm/<release>/ holds one cluster in the same state, captured on each
release by capture-release.sh (README.md there: the nodes, the jobs, every command).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.slurm.client import SCONTROL_JSON_SINCE
from scheduler.slurm.errors import (
    SlurmCommandRefused,
    SlurmOutputError,
    SlurmPermissionDenied,
    SlurmUnknownNode,
    SlurmUnreachable,
    classify_failure,
)
from scheduler.slurm.records import (
    GpuAllocation,
    load_json,
    parse_nodes,
    parse_ping,
    parse_reservations,
    parse_sacct,
    parse_squeue_jobs,
    parse_version,
    slurm_release,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
RELEASES = ("22.05", "24.11")
# The per-node document of each release: sinfo --json until 23.02, then scontrol's.
NODE_DOCUMENTS = {"22.05": "sinfo-all.json", "24.11": "scontrol-nodes.json"}


def text(release: str, name: str) -> str:
    return (FIXTURES / release / name).read_text()


def document(release: str, name: str) -> dict:
    return load_json((name,), text(release, name))


def names(nodes) -> list[str]:
    return sorted(node.name for node in nodes)


@pytest.fixture(params=RELEASES)
def release(request) -> str:
    return request.param


@pytest.fixture
def nodes(release):
    return {node.name: node for node in parse_nodes(document(release, NODE_DOCUMENTS[release]))}


@pytest.fixture
def jobs(release):
    read = parse_squeue_jobs(document(release, "squeue-states-all.json"))
    return {job.job_id: job for job in read}


def test_the_release_is_read_from_the_tools_and_from_their_documents():
    assert parse_version(text("22.05", "version.txt")) == (22, 5)  # "slurm-wlm 22.05.8"
    assert parse_version(text("24.11", "version.txt")) == (24, 11)
    assert parse_version("slurm 23.02.7\n") == (23, 2)
    assert slurm_release(document("22.05", "sinfo.json")) == "22.05.8"  # meta.Slurm
    assert slurm_release(document("24.11", "scontrol-nodes.json")) == "24.11.5"  # meta.slurm
    with pytest.raises(SlurmOutputError, match="no Slurm release"):
        parse_version("scontrol: error: something\n")


def test_every_node_of_every_partition_is_read_with_its_gpus(nodes):
    assert sorted(nodes) == [f"node-{index}" for index in range(1, 9)]
    assert {node.gpus for node in nodes.values()} == {4}
    assert nodes["node-1"].partitions == ("gpu",)
    assert nodes["node-5"].partitions == ("hidden",)  # Hidden=YES
    assert all(node.boot_time for node in nodes.values())


def test_each_nodes_state_reads_the_same_on_both_releases(nodes):
    busy = nodes["node-1"]
    assert (busy.state, busy.flags, busy.held_by_others) == ("mixed", frozenset(), False)
    mac = nodes["node-2"]
    assert (mac.state, mac.drain, mac.drained) == ("idle", True, True)
    assert mac.reason == "MAC: GPU 3 XID 79; reboot" and mac.reason_is_mac
    assert mac.reason_user == "root" and mac.reason_time is not None
    reserved = nodes["node-3"]
    assert reserved.flags == {"MAINTENANCE", "RESERVED"} and reserved.held_by_others
    rebooting = nodes["node-5"]
    assert rebooting.state == "mixed" and rebooting.flags == {"DRAIN", "REBOOT_REQUESTED"}
    assert rebooting.reboot_pending and rebooting.reason == "MAC: GPU 0 fell off the bus"
    down = nodes["node-6"]
    assert down.down and down.reason == "bad PSU, ticket 4711" and down.held_by_others
    free = nodes["node-8"]
    assert (free.state, free.flags, free.reason, free.reason_time) == ("idle", set(), "", None)


def test_sinfo_json_of_23_02_and_later_is_an_output_error_not_a_cluster_without_nodes():
    """24.11's sinfo --json prints {"sinfo": [...]}: groups by partition and state."""
    grouped = document("24.11", "sinfo-all.json")
    assert "nodes" not in grouped and grouped["sinfo"]
    with pytest.raises(SlurmOutputError, match=r"sinfo --json of Slurm 23\.02 or later"):
        parse_nodes(grouped, ("sinfo", "--all", "--json"))
    with pytest.raises(SlurmOutputError, match=r"no list of nodes .*keys: errors, meta"):
        parse_nodes({"meta": {}, "errors": []})


def test_22_05_has_no_scontrol_json_and_its_sinfo_reads_every_node_whatever_it_is_asked():
    refused = text("22.05", "scontrol-nodes.json.stderr")
    assert "unrecognized option '--json'" in refused
    assert (22, 5) < SCONTROL_JSON_SINCE <= (24, 11)
    one = parse_nodes(document("22.05", "sinfo-node.json"))  # sinfo --json --nodes=node-2
    assert len(one) == 8


def test_scontrol_reads_one_node_and_nothing_for_a_name_it_does_not_know():
    (node,) = parse_nodes(document("24.11", "scontrol-node.json"))
    assert node.name == "node-2" and node.drained
    unknown = document("24.11", "scontrol-node-unknown.json")  # exit 0, a warning
    assert parse_nodes(unknown) == []
    assert unknown["warnings"][0]["description"] == "No nodes to dump"


def test_without_all_a_user_who_is_no_operator_misses_the_hidden_partition_on_24_11():
    """Why the client passes --all: what `nobody` sees of the same cluster."""
    assert "node-5" not in names(parse_nodes(document("24.11", "scontrol-nodes-as-nobody.json")))
    hidden = parse_squeue_jobs(document("24.11", "squeue-as-nobody.json"))
    assert 6 not in {job.job_id for job in hidden}  # the job on node-5 (partition hidden)


def test_without_states_all_squeue_json_of_24_11_leaves_finished_jobs_out():
    """Why the client passes --states=all (24.05.1 and on filter --json as text)."""
    default = {job.job_id for job in parse_squeue_jobs(document("24.11", "squeue.json"))}
    assert default == {3, 4, 5, 6, 7}
    old = {job.job_id for job in parse_squeue_jobs(document("22.05", "squeue.json"))}
    assert old == {1, 2, 3, 4, 5, 6, 7}


def test_jobs_read_the_same_with_their_gpu_indexes(jobs):
    assert sorted(jobs) == list(range(1, 8))
    alice, bob = jobs[3], jobs[4]
    assert (alice.user, alice.account, alice.name) == ("maclab-alice", "physics", "train-a")
    assert alice.gpus == (GpuAllocation("node-1", (0, 1)),) and alice.gpu_count == 2
    assert (bob.user, bob.account) == ("maclab-bob", "")
    assert bob.gpu_indexes("node-1") == (2,)
    assert alice.state == "RUNNING" and alice.holds_gpus and alice.ended is None
    both = jobs[5]
    assert both.nodes == ("node-4", "node-7")
    assert both.gpus == (GpuAllocation("node-4", (0,)), GpuAllocation("node-7", (0,)))
    hidden = jobs[6]
    assert hidden.partition == "hidden" and hidden.gpu_indexes("node-5") == (0, 1, 2, 3)


def test_finished_and_pending_jobs_read_the_same(jobs):
    done, failed, waiting = jobs[1], jobs[2], jobs[7]
    assert (done.state, done.finished, done.gpus) == ("COMPLETED", True, ())
    assert done.nodes == ("node-8",) and done.gpu_count == 1 and done.started <= done.ended
    assert (failed.state, failed.user) == ("FAILED", "maclab-bob")
    assert waiting.state == "PENDING" and waiting.started is None and waiting.nodes == ()


def test_accounting_reads_the_same(release):
    accounted = {job.job_id: job for job in parse_sacct(text(release, "sacct.txt"))}
    assert sorted(accounted) == list(range(1, 8))
    done = accounted[1]
    assert (done.state, done.user, done.gpu_count) == ("COMPLETED", "root", 1)
    assert accounted[2].user == "maclab-bob" and accounted[2].state == "FAILED"
    assert accounted[5].nodes == ("node-4", "node-7") and accounted[5].gpu_count == 2
    assert accounted[6].partition == "hidden" and accounted[6].gpu_count == 4
    assert accounted[7].nodes == () and accounted[7].started is None  # "None assigned"


def test_reservations_and_pings_read_the_same(release):
    (reservation,) = parse_reservations(text(release, "reservations.txt"))
    assert (reservation.name, reservation.nodes, reservation.users) == (
        "maint-rack2", ("node-3",), ("root",),
    )  # fmt: skip
    assert reservation.active and "MAINT" in reservation.flags
    assert reservation.start < reservation.end
    (up,) = parse_ping(text(release, "ping.txt"))
    (down,) = parse_ping(text(release, "down-ping.txt"))
    assert (up.up, down.up) == (True, False)


@pytest.mark.parametrize(
    ("name", "kind", "words"),
    [
        ("update-unknown-node.txt", SlurmUnknownNode, "Invalid node name specified"),
        ("resume-idle-node.txt", SlurmCommandRefused, "Invalid node state specified"),
        ("drain-without-reason.txt", SlurmCommandRefused, "You must specify a reason"),
        ("drain-as-nobody.txt", SlurmPermissionDenied, "Invalid user id"),
    ],
)
def test_each_refusal_gets_its_type_on_both_releases(release, name, kind, words):
    error = classify_failure(("scontrol", "update"), 1, text(release, f"{name}.stderr"))
    assert type(error) is kind and words in error.detail


def test_a_stopped_controller_is_unreachable_on_24_11_as_text_not_as_a_document():
    """24.11's JSON tools exit 1 and say why on stderr; 22.05's sinfo and squeue exit 0
    with the failure in the document's errors (the client then pings)."""
    for name in ("down-scontrol-nodes.json", "down-squeue.json", "down-sinfo.json"):
        said = text("24.11", f"{name}.stderr")
        assert type(classify_failure((name,), 1, said)) is SlurmUnreachable
        assert not (FIXTURES / "24.11" / name).exists()  # nothing on stdout
    for name in ("down-sinfo.json", "down-squeue.json"):
        with pytest.raises(SlurmCommandRefused):
            load_json((name,), text("22.05", name))
