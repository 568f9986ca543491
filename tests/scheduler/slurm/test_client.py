"""SlurmClient against a real Slurm 22.05 cluster (testkit.slurmlab): no stand-in for scontrol.

One lab for the module (three nodes, four GPUs each, slurmdbd); each test leaves the
nodes it used idle and empty again. The 5-second job is submitted when the module
starts and checked last, so its wait overlaps the other tests.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from scheduler.slurm import (
    SlurmClient,
    SlurmCommandRefused,
    SlurmToolMissing,
    SlurmUnknownNode,
    SlurmUnreachable,
)
from testkit.slurmlab import LAB_USERS, SlurmLab
from testkit.waiting import wait_for

pytestmark = [pytest.mark.slurm]


@pytest.fixture(scope="module")
def client(slurm_lab: SlurmLab) -> SlurmClient:
    return SlurmClient(slurm_lab.conf)


@pytest.fixture(scope="module")
def short_job(slurm_lab: SlurmLab) -> tuple[int, datetime]:
    """A 5 s job on node-3, submitted once, before the module's other tests run."""
    submitted = datetime.now(UTC) - timedelta(seconds=1)
    return slurm_lab.submit(seconds=5, gpus=1, node="node-3", name="five-seconds"), submitted


@pytest.fixture(autouse=True, scope="module")
def _start_the_short_job(short_job):
    return short_job


def test_ping_answers_with_the_controller(client):
    controller = client.ping()
    assert controller.up and controller.role == "primary"


def test_every_node_is_listed_with_its_gpus(client, slurm_lab):
    nodes = {node.name: node for node in client.nodes()}
    assert sorted(nodes) == slurm_lab.node_names
    assert all(node.gpus == 4 and node.partitions == ("gpu",) for node in nodes.values())


def test_drain_with_a_mac_reason_then_resume(client, slurm_lab):
    client.drain("node-1", "MAC: GPU 3 XID 79 (fell off the bus); reboot")
    node = client.node("node-1")
    assert node.drained and node.reason == "MAC: GPU 3 XID 79 (fell off the bus); reboot"
    assert node.reason_is_mac and not node.held_by_others
    assert node.reason_user == "root" and node.reason_time is not None
    assert slurm_lab.node_states()["node-1"] == "drained"  # as sinfo shows a person

    client.resume("node-1")
    node = client.node("node-1")
    assert (node.state, node.drain, node.reason) == ("idle", False, "")


def test_an_administrators_drain_is_seen_as_not_macs(client, slurm_lab):
    slurm_lab.scontrol("update", "NodeName=node-2", "State=DRAIN", "Reason=RMA ticket 4711")
    try:
        node = client.node("node-2")
        assert node.drained and node.reason == "RMA ticket 4711"
        assert not node.reason_is_mac and node.held_by_others
    finally:
        slurm_lab.scontrol("update", "NodeName=node-2", "State=RESUME")


def test_a_drain_lets_the_running_job_finish(client, slurm_lab):
    job = slurm_lab.submit(gpus=1, node="node-2", name="keeps-running")
    slurm_lab.wait_job(job, "RUNNING")
    try:
        client.drain("node-2", "MAC: ECC uncorrectable on GPU 0; reboot")
        node = client.node("node-2")
        assert node.drain and not node.drained  # draining: the job still runs
        assert slurm_lab.job_state(job) == "RUNNING"
    finally:
        slurm_lab.run("scancel", str(job))
        slurm_lab.wait_job(job, "CANCELLED")
        client.resume("node-2")


def test_an_administrators_reservation_is_listed_at_once(client, slurm_lab):
    slurm_lab.scontrol(
        "create", "reservation", "ReservationName=maint", "Nodes=node-2",
        "StartTime=now", "Duration=10", "Users=root", "Flags=MAINT",
    )  # fmt: skip
    try:
        (reservation,) = client.reservations()
        assert reservation.name == "maint" and reservation.active
        assert reservation.nodes == ("node-2",) and "MAINT" in reservation.flags
    finally:
        slurm_lab.scontrol("delete", "ReservationName=maint")
    assert client.reservations() == []


def test_an_unknown_node_is_its_own_error_with_slurms_words(client):
    with pytest.raises(SlurmUnknownNode, match="Invalid node name specified"):
        client.drain("node-99", "MAC: test")


def test_resuming_a_node_that_is_not_drained_is_refused(client):
    with pytest.raises(SlurmCommandRefused, match="Invalid node state specified") as caught:
        client.resume("node-1")
    assert caught.value.command == ("scontrol", "update", "NodeName=node-1", "State=RESUME")


def test_bad_arguments_are_refused_before_slurm_is_asked(client):
    with pytest.raises(ValueError, match="not one Slurm NodeName"):
        client.drain("node-[1-3]", "MAC: would drain three")
    with pytest.raises(ValueError, match="reason is empty"):
        client.drain("node-1", "  ")
    with pytest.raises(ValueError, match="nextstate"):
        client.reboot_asap("node-1", "MAC: x", nextstate="POWER_DOWN")


def test_two_jobs_on_one_node_get_disjoint_gpu_indexes(client, slurm_lab):
    alice, bob = LAB_USERS
    first = slurm_lab.submit(gpus=2, node="node-2", user=alice, name="train-a")
    second = slurm_lab.submit(gpus=2, node="node-2", user=bob, name="train-b")
    slurm_lab.wait_job(first, "RUNNING")
    slurm_lab.wait_job(second, "RUNNING")
    jobs = {job.job_id: job for job in client.jobs()}
    a, b = jobs[first], jobs[second]
    assert (a.user, a.name, a.partition, b.user) == (alice, "train-a", "gpu", bob)
    assert len(a.gpu_indexes("node-2")) == len(b.gpu_indexes("node-2")) == 2
    assert set(a.gpu_indexes("node-2")) | set(b.gpu_indexes("node-2")) == {0, 1, 2, 3}
    assert a.holds_gpus and a.started is not None and a.ended is None

    slurm_lab.run("scancel", str(first), str(second))
    slurm_lab.wait_job(first, "CANCELLED")
    slurm_lab.wait_job(second, "CANCELLED")
    jobs = {job.job_id: job for job in client.jobs()}
    assert not jobs[first].holds_gpus and jobs[first].gpus == ()  # they left their GPUs


def test_reboot_asap_goes_through_the_labs_reboot_program(client, slurm_lab):
    booted = client.node("node-1").boot_time
    client.reboot_asap("node-1", "MAC: GPU 2 XID 79; reboot")
    node = client.node("node-1")
    assert node.drain and node.reason == "MAC: GPU 2 XID 79; reboot"
    slurm_lab.wait_nodes("idle", nodes=["node-1"])
    node = client.node("node-1")
    assert not node.reboot_pending and not node.drain and node.reason == ""  # nextstate=RESUME
    assert node.boot_time > booted
    assert [name for _, name in slurm_lab.reboots()] == ["node-1"]


def test_ping_fails_fast_with_slurmctld_stopped_and_answers_after_restart(slurm_lab):
    client = SlurmClient(slurm_lab.conf, timeout=1.0, ping_timeout=1.0)
    slurm_lab.stop_controller()
    try:
        started = time.monotonic()
        with pytest.raises(SlurmUnreachable, match="is DOWN"):
            client.ping()
        assert time.monotonic() - started < 3  # not the tools' 9 s of retries
        started = time.monotonic()
        with pytest.raises(SlurmUnreachable, match="no answer within 1 s"):
            client.drain("node-1", "MAC: while down")  # the tools retry for ~9 s
        assert time.monotonic() - started < 3
    finally:
        slurm_lab.start_controller()
    assert client.ping().up
    assert len(client.nodes()) == 3


def test_a_missing_tool_is_its_own_error(slurm_lab):
    client = SlurmClient(slurm_lab.conf, environ={"PATH": "/nonexistent"})
    with pytest.raises(SlurmToolMissing, match="scontrol is not installed"):
        client.ping()


def test_a_five_second_job_that_ended_is_still_found(client, slurm_lab, short_job):
    """Between two reads it started and ended: slurmctld still has it (MinJobAge), and
    accounting (slurmdbd) has it for good, with its user, node and GPU count."""
    job_id, submitted = short_job
    slurm_lab.wait_job(job_id, "COMPLETED")
    (known,) = [job for job in client.jobs() if job.job_id == job_id]
    assert known.state == "COMPLETED" and known.nodes == ("node-3",)
    assert known.ended - known.started >= timedelta(seconds=5)

    def accounted():
        found = [job for job in client.accounting_jobs(submitted) if job.job_id == job_id]
        return found and found[0].ended and found[0]

    record = wait_for(accounted, 15, what=f"job {job_id} finished in sacct")
    assert (record.user, record.name, record.nodes) == ("root", "five-seconds", ("node-3",))
    assert record.gpu_count == 1 and record.state == "COMPLETED"
    assert client.accounting_jobs(submitted, job_ids=[job_id])[0].job_id == job_id


def test_a_ping_munge_refuses_says_slurms_own_words(slurm_lab, tmp_path):
    """The master's user cannot reach munged (its socket's folder is root's): scontrol
    says why on its standard error, and the ping's error carries it (given the few
    seconds scontrol spends retrying munge first; within a 2 s ping it is a timeout)."""
    import os
    import shutil

    if os.geteuid() != 0 or not shutil.which("runuser"):
        pytest.skip("running scontrol as another user needs root and runuser")
    assert slurm_lab.munge_socket.parent.stat().st_mode & 0o077 == 0  # root's alone
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "scontrol").write_text(
        f'#!/bin/sh\nexec runuser -u nobody -- {shutil.which("scontrol")} "$@"\n'
    )
    (shim / "scontrol").chmod(0o755)
    client = SlurmClient(
        slurm_lab.conf,
        environ={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"},
        ping_timeout=20,
    )
    with pytest.raises(SlurmUnreachable) as raised:
        client.ping()
    said = raised.value.detail
    assert said.startswith("primary at ") and " is DOWN; " in said, said
    assert "Munge encode failed" in said and "Permission denied" in said, said
