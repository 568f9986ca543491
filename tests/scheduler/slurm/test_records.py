"""The parsers read what Slurm 22.05's tools really print (tests/fixtures/slurm, captured
from the lab by testkit.slurmcapture; its README says what each node and job is)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.slurm.errors import SlurmCommandRefused, SlurmOutputError
from scheduler.slurm.records import (
    SACCT_DELIMITER,
    GpuAllocation,
    gres_count,
    gres_indexes,
    load_json,
    parse_nodes,
    parse_ping,
    parse_record,
    parse_reservations,
    parse_sacct,
    parse_squeue_jobs,
    slurm_release,
    tres_gpus,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def document(name: str) -> dict:
    return load_json(("test",), fixture(name))


@pytest.fixture(scope="module")
def nodes():
    return {node.name: node for node in parse_nodes(document("sinfo.json"))}


@pytest.fixture(scope="module")
def jobs():
    return {job.job_id: job for job in parse_squeue_jobs(document("squeue.json"))}


def test_the_release_is_read_from_the_document():
    assert slurm_release(document("sinfo.json")) == "22.05.8"


def test_every_node_is_read_with_its_gpus(nodes):
    assert sorted(nodes) == [f"node-{index}" for index in range(1, 9)]
    assert {node.gpus for node in nodes.values()} == {4}
    assert nodes["node-1"].partitions == ("gpu",)
    assert nodes["node-1"].boot_time is not None


def test_macs_drain_is_told_from_an_administrators(nodes):
    mac = nodes["node-2"]
    assert (mac.state, mac.drain, mac.drained) == ("idle", True, True)
    assert mac.reason == "MAC: GPU 3 XID 79; reboot"
    assert mac.reason_is_mac and not mac.held_by_others
    assert mac.reason_user == "root"
    assert mac.reason_time is not None

    admin = nodes["node-5"]
    assert (admin.state, admin.drain, admin.drained) == ("mixed", True, False)  # draining
    assert admin.reason == "admin: firmware update"
    assert not admin.reason_is_mac and admin.held_by_others


def test_a_down_node_and_a_reserved_node_are_held_by_others(nodes):
    down = nodes["node-3"]
    assert down.down and down.reason == "bad PSU, ticket 4711" and down.held_by_others
    reserved = nodes["node-4"]
    assert reserved.flags == {"MAINTENANCE", "RESERVED"}
    assert reserved.reserved and reserved.reason == "" and reserved.held_by_others


def test_a_requested_reboot_shows_as_pending_and_draining(nodes):
    rebooting = nodes["node-6"]
    assert rebooting.reboot_pending and rebooting.drain
    assert rebooting.reason_is_mac and not rebooting.held_by_others


def test_a_free_node_is_nobodys(nodes):
    free = nodes["node-7"]
    assert not (free.drain or free.down or free.reserved or free.held_by_others)
    assert free.reason == "" and free.reason_user is None and free.reason_time is None


def test_two_jobs_on_one_node_hold_disjoint_gpu_indexes(jobs):
    alice, bob = jobs[3], jobs[4]
    assert (alice.user, alice.account, alice.name) == ("maclab-alice", "physics", "train-a")
    assert (bob.user, bob.account) == ("maclab-bob", "")
    assert alice.gpus == (GpuAllocation("node-1", (0, 1)),)
    assert bob.gpu_indexes("node-1") == (2, 3)
    assert alice.state == "RUNNING" and alice.holds_gpus and alice.gpu_count == 2
    assert alice.started and alice.ended is None and alice.partition == "gpu"


def test_a_job_on_two_nodes_has_indexes_per_node(jobs):
    both = jobs[5]
    assert both.nodes == ("node-7", "node-8")
    assert both.gpus == (GpuAllocation("node-7", (0,)), GpuAllocation("node-8", (0,)))
    assert both.gpu_count == 2


def test_finished_jobs_are_still_known_without_their_indexes(jobs):
    done, failed = jobs[1], jobs[2]
    assert (done.state, done.finished, done.holds_gpus) == ("COMPLETED", True, False)
    assert done.nodes == ("node-8",) and done.gpus == () and done.gpu_count == 1
    assert done.started < done.ended
    assert (failed.state, failed.user) == ("FAILED", "maclab-bob")


def test_a_pending_job_has_no_start_and_no_nodes(jobs):
    waiting = jobs[8]
    assert waiting.state == "PENDING"
    assert waiting.started is None and waiting.nodes == () and waiting.gpus == ()


def test_accounting_keeps_jobs_with_users_and_gpu_counts():
    accounted = {job.job_id: job for job in parse_sacct(fixture("sacct.txt"))}
    assert sorted(accounted) == list(range(1, 9))
    done = accounted[1]
    assert (done.state, done.user, done.account) == ("COMPLETED", "root", "root")
    assert done.name == "short"
    assert done.nodes == ("node-8",) and done.gpu_count == 1 and done.gpus == ()
    assert done.submitted <= done.started < done.ended
    assert accounted[2].user == "maclab-bob"  # resolved from the uid, no association needed
    assert accounted[5].nodes == ("node-7", "node-8")
    running = accounted[3]
    assert running.state == "RUNNING" and running.ended is None and running.gpu_count == 2
    pending = accounted[8]
    assert pending.nodes == () and pending.started is None


def test_an_accounting_line_of_the_wrong_shape_is_left_out_and_the_others_kept(caplog):
    def line(job_id: str, name: str) -> str:
        return SACCT_DELIMITER.join(
            [job_id, job_id, name, "bob", "ml", "gpu", "COMPLETED", "n1", "gres/gpu=1",
             "1796323997", "1796323999", "1796324001"]
        )  # fmt: skip

    text = "\n".join(
        [line("51", "ok"), line("52", "two\nlines"), line("53", f"a{SACCT_DELIMITER}b"),
         line("54", "fine")]
    )  # fmt: skip

    with caplog.at_level("WARNING", logger="scheduler.slurm.records"):
        jobs = parse_sacct(text)

    assert [job.job_id for job in jobs] == [51, 54]
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 3 and all("sacct: left out a line of" in words for words in said)


def test_a_cancelled_array_task_is_read_from_accounting():
    line = SACCT_DELIMITER.join(
        ["41", "40_3", "sweep", "bob", "ml", "gpu", "CANCELLED by 0", "n[1-2]",
         "cpu=2,gres/gpu=8,node=2", "1796323997", "1796323999", "1796324001"]
    )  # fmt: skip
    (job,) = parse_sacct(line)
    assert (job.job_id, job.array_job_id, job.array_task_id) == (41, 40, 3)
    assert job.slurm_id == "40_3"  # as Slurm shows it to its user
    assert job.state == "CANCELLED" and job.finished and job.gpu_count == 8
    assert job.ended == datetime.fromtimestamp(1796324001, tz=UTC)


def test_reservations_are_read_from_scontrol():
    (reservation,) = parse_reservations(fixture("reservations.txt"))
    assert reservation.name == "maint-rack2" and reservation.active
    assert reservation.nodes == ("node-4",) and "MAINT" in reservation.flags
    assert reservation.users == ("root",)
    assert reservation.start < reservation.end
    assert parse_reservations("No reservations in the system\n") == []


def test_ping_reads_whether_the_controller_is_up():
    (up,) = parse_ping(fixture("ping_up.txt"))
    assert (up.role, up.up) == ("primary", True)
    (down,) = parse_ping(fixture("ping_down.txt"))
    assert (down.role, down.up) == ("primary", False)


def test_a_document_with_errors_is_refused_with_slurms_words():
    errors = json.loads(fixture("errors.json"))
    with pytest.raises(SlurmCommandRefused, match="Failed while looking for jobs"):
        load_json(("squeue", "--json"), errors["squeue_controller_down"]["stdout"])


def test_text_that_is_not_json_is_an_output_error():
    with pytest.raises(SlurmOutputError, match="not JSON"):
        load_json(("sinfo", "--json"), "sinfo: error: something\n")


@pytest.mark.parametrize(
    ("detail", "indexes"),
    [
        ("gpu:2(IDX:0-1)", (0, 1)),
        ("gpu:h200:3(IDX:0,2-3)", (0, 2, 3)),
        ("gpu:1(IDX:5),mps:100(0)", (5,)),
        ("gpu:0", ()),
        ("gpu:2(IDX:N/A)", ()),
        ("gpu:h100:8(S:0-1)", ()),  # a node's socket binding, not indexes
        ("", ()),
    ],
)
def test_gres_indexes(detail, indexes):
    assert gres_indexes(detail) == indexes


def test_gres_and_tres_counts():
    assert gres_count("gpu:4") == 4
    assert gres_count("gpu:h200:8(S:0-1)") == 8
    assert gres_count("(null)") == 0
    assert tres_gpus("cpu=2,node=2,billing=2,gres/gpu=4") == 4
    assert tres_gpus("cpu=1,gres/gpu=2,gres/gpu:h200=2") == 2
    assert tres_gpus("cpu=1") == 0
    # Typed only (AccountingStorageTRES=gres/gpu:a100,gres/gpu:h200): their sum.
    assert tres_gpus("cpu=1,gres/gpu:a100=2") == 2
    assert tres_gpus("cpu=1,gres/gpu:a100=2,gres/gpu:h200=1") == 3
    assert tres_gpus("gres/gpu:a100=x,gres/gpufoo=3") == 0


def test_a_record_line_keeps_values_with_spaces():
    fields = parse_record("NodeName=n1 OS=Linux 6.1 #1 SMP Reason=MAC: GPU 3; reboot [root@t]")
    assert fields["OS"] == "Linux 6.1 #1 SMP"
    assert fields["Reason"] == "MAC: GPU 3; reboot [root@t]"


def test_the_json_of_later_releases_is_read_too():
    """v0.0.39 and on (Slurm 23.02+): the state as one list, numbers as {set, number}.
    (Made up; test_records_releases.py reads what 24.11 really prints.)"""
    (node,) = parse_nodes(
        {"nodes": [{"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "MAC: x",
                    "reason_changed_at": {"set": True, "infinite": False, "number": 1796323997},
                    "gres": "gpu:8"}]}
    )  # fmt: skip
    assert (node.state, node.flags, node.drained, node.gpus) == ("idle", {"DRAIN"}, True, 8)
    assert node.reason_time == datetime.fromtimestamp(1796323997, tz=UTC)
    (job,) = parse_squeue_jobs(
        {"jobs": [{"job_id": 7, "job_state": ["RUNNING"], "user_name": "bob",
                   "start_time": {"set": True, "number": 1796323997},
                   "end_time": {"set": True, "infinite": True, "number": 0},
                   "array_job_id": {"set": True, "number": 0},
                   "job_resources": {"allocated_nodes": [{"nodename": "n1"}]},
                   "gres_detail": ["gpu:2(IDX:4-5)"]}]}
    )  # fmt: skip
    assert job.state == "RUNNING" and job.gpu_indexes("n1") == (4, 5) and job.started
    assert job.array_job_id is None


def test_slurm_24_05_and_later_name_the_nodes_under_job_resources_nodes_allocation():
    """data_parser v0.0.41 and on: job_resources.nodes is {count, list, allocation: [...]},
    where 22.05 to 23.11 had job_resources.allocated_nodes; gres_detail keeps its order,
    and holds null for a node without GRES."""
    (job,) = parse_squeue_jobs(
        {"jobs": [{"job_id": 8, "job_state": ["RUNNING"], "user_name": "ann",
                   "start_time": {"set": True, "number": 1796323997},
                   "nodes": "g[01-03]",
                   "job_resources": {"nodes": {
                       "count": 3, "list": "g[01-03]", "whole": False,
                       "allocation": [{"index": 1, "name": "g02"}, {"index": 0, "name": "g01"},
                                      {"index": 2, "name": "g03"}]}},
                   "gres_detail": ["gpu:h200:2(IDX:0,3)", None, "gpu:h200:1(IDX:7)"]}]}
    )  # fmt: skip
    assert job.nodes == ("g01", "g02", "g03")
    assert (job.gpu_indexes("g01"), job.gpu_indexes("g02"), job.gpu_indexes("g03")) == (
        (0, 3), (), (7,),
    )  # fmt: skip


def test_an_array_task_and_a_heterogeneous_component_keep_the_id_slurm_shows():
    jobs = parse_squeue_jobs(
        {"jobs": [
            {"job_id": 130, "job_state": "RUNNING", "array_job_id": 123, "array_task_id": 4},
            {"job_id": 201, "job_state": "RUNNING", "array_job_id": 0, "het_job_id": 200,
             "het_job_offset": 1},
            {"job_id": 7, "job_state": ["RUNNING"], "array_job_id": {"set": True, "number": 0},
             "array_task_id": {"set": False, "number": 0}},
        ]}
    )  # fmt: skip
    assert [job.slurm_id for job in jobs] == ["123_4", "200+1", "7"]
