"""Slurm's GPU index is not NVML's: Slurm numbers a node's GPUs in the order of their device
files (minor numbers), NVML and the exporter's `gpu` label by PCI bus. Job attribution maps
one onto the other when it records a job, from the minor number the exporter reports
(`device="nvidia<minor>"`), so every reader names the GPU the job really holds."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from contract.verdicts import answer_digest
from healthcheck.sweep import NODE_FIELDS
from inventory.models import GpuHealth, Node
from inventory.services.health import Observation, judge_health, save_health
from macweb.dashboard.jobreport import job_gpus
from scheduler.jobread import ReadResult, current_jobs, held_gpu_rows, jobs_on_gpu, record
from scheduler.metrics import job_metrics
from scheduler.models import Job, JobGpu
from scheduler.slurm.records import GpuAllocation, SlurmJob
from testkit.factories import online_gpu_node

pytestmark = pytest.mark.django_db


def report_gpus(node: Node, minors: dict[int, int | None]) -> None:
    """The sweep reads and keeps the node's verdict answer: GPU `index` is /dev/nvidia<minor>
    (no `device` label where the minor is None, as AMD's exporter or an old agent)."""
    lines = []
    for index, minor in minors.items():
        device = f'device="nvidia{minor}",' if minor is not None else ""
        lines.append(
            f'mac_gpu_health{{gpu="{index}",UUID="GPU-{index}",{device}serial="",'
            f'state="healthy",action="none"}} 0'
        )
    body = "\n".join([*lines, 'mac_node_boot_info{boot_id="b-1"} 1', ""]).encode()
    row = Node.objects.values(*NODE_FIELDS).get(pk=node.pk)
    seen = Observation(node.pk, True, answer_digest(body), [("nvidia", body, False)])
    now = timezone.now()
    save_health(judge_health([row], {node.pk: seen}, now), now)


def running(job_id: int, node: str, indexes: tuple[int, ...], started) -> SlurmJob:
    return SlurmJob(
        job_id=job_id, name="train", user="alice", account="", partition="gpu",
        state="RUNNING", nodes=(node,), gpus=(GpuAllocation(node, indexes),),
        gpu_count=len(indexes), submitted=started, started=started, ended=None,
    )  # fmt: skip


def job_info(job_id: int) -> list[dict]:
    (family,) = list(job_metrics())
    return [s.labels for s in family.samples if s.labels["job_id"] == str(job_id)]


def test_the_exporters_minor_number_is_kept_with_each_gpu():
    node = online_gpu_node("gpu-21", gpu_count=3)
    report_gpus(node, {0: 2, 1: 1, 2: 0})

    assert list(GpuHealth.objects.filter(node=node).values_list("index", "minor")) == [
        (0, 2), (1, 1), (2, 0),
    ]  # fmt: skip


def test_a_job_on_slurm_gpu_0_is_shown_on_the_gpu_whose_device_file_comes_first():
    node = online_gpu_node("gpu-22", gpu_count=3)
    report_gpus(node, {0: 2, 1: 1, 2: 0})  # NVML's GPU 2 is /dev/nvidia0: Slurm's GPU 0
    now = timezone.now()

    record([running(501, node.hostname, (0,), now)], [], now, ReadResult())

    job = Job.objects.get(job_id=501)
    # every reader names NVML's GPU 2, with its UUID: metrics, GPU alerts, node page, job page
    assert job_info(501) == [
        {"Hostname": "gpu-22", "gpu": "2", "UUID": "GPU-2", "job_id": "501", "user": "alice",
         "partition": "gpu"}
    ]  # fmt: skip
    assert jobs_on_gpu(node.pk, 2, now) == [job]
    assert jobs_on_gpu(node.pk, 0, now) == []
    (row,) = JobGpu.objects.filter(job=job)
    assert (row.slurm_index, row.index) == (0, 2)  # Slurm's own kept beside it
    assert list(current_jobs([node.pk])) == [(node.pk, 2)]
    assert [(g["index"], g["slurm_index"], g["uuid"]) for g in job_gpus(job)] == [(2, 0, "GPU-2")]


def test_slurm_counts_the_device_files_in_order_whatever_their_numbers():
    node = online_gpu_node("gpu-23", gpu_count=4)
    report_gpus(node, {0: 7, 1: 3, 2: 5, 3: 4})  # by minor: GPU 1, 3, 2, 0
    now = timezone.now()

    record([running(502, node.hostname, (0, 1, 2, 3), now)], [], now, ReadResult())

    rows = JobGpu.objects.filter(job__job_id=502).order_by("slurm_index")
    assert [(row.slurm_index, row.index) for row in rows] == [(0, 1), (1, 3), (2, 2), (3, 0)]


def test_where_the_minors_are_not_known_slurms_index_is_taken_as_the_exporters():
    amd = online_gpu_node("gpu-24", gpu_count=2)
    report_gpus(amd, {0: None, 1: None})  # no device label (AMD, an agent before it)
    partial = online_gpu_node("gpu-25", gpu_count=2)
    report_gpus(partial, {0: 1, 1: None})  # one GPU's minor unknown: no order to trust
    unseen = online_gpu_node("gpu-26", gpu_count=2)  # no verdict read yet
    now = timezone.now()

    nodes = [amd, partial, unseen]
    record([running(503 + n, node.hostname, (0,), now) for n, node in enumerate(nodes)], [], now,
           ReadResult())  # fmt: skip

    assert sorted(JobGpu.objects.values_list("job__job_id", "slurm_index", "index")) == [
        (503, 0, 0), (504, 0, 0), (505, 0, 0),
    ]  # fmt: skip
    assert [labels["gpu"] for labels in job_info(503)] == ["0"]


def test_a_job_recorded_before_the_minors_were_known_moves_to_its_gpu_once_they_are():
    node = online_gpu_node("gpu-27", gpu_count=2)
    started = timezone.now() - timedelta(seconds=40)
    record([running(510, node.hostname, (1,), started)], [], started, ReadResult())
    assert JobGpu.objects.get(job__job_id=510).index == 1  # no verdict yet: Slurm's own

    report_gpus(node, {0: 1, 1: 0})
    now = timezone.now()
    record([running(510, node.hostname, (1,), started)], [], now, ReadResult())

    row = JobGpu.objects.get(job__job_id=510)
    assert (row.slurm_index, row.index, row.since, row.until) == (1, 0, started, None)
    assert [r[1] for r in held_gpu_rows()] == [0]


def test_two_gpus_that_say_the_same_minor_leave_the_order_unknown():
    node = online_gpu_node("gpu-28", gpu_count=2)
    report_gpus(node, {0: 1, 1: 0})
    GpuHealth.objects.filter(node=node).update(minor=0)  # as no exporter should say
    now = timezone.now()

    record([running(520, node.hostname, (0, 1), now)], [], now, ReadResult())

    rows = JobGpu.objects.filter(job__job_id=520).order_by("slurm_index")
    assert [(row.slurm_index, row.index) for row in rows] == [(0, 0), (1, 1)]


def test_a_row_written_without_slurms_index_is_taken_as_holding_that_index():
    node = online_gpu_node("gpu-29", gpu_count=2)
    report_gpus(node, {0: 1, 1: 0})
    started = timezone.now() - timedelta(minutes=5)
    job = Job.objects.create(job_id=530, state="RUNNING", started=started)
    JobGpu.objects.create(job=job, node=node, slurm_node="gpu-29", index=1, since=started)

    record([running(530, node.hostname, (1,), started)], [], timezone.now(), ReadResult())

    (row,) = JobGpu.objects.filter(job=job)
    assert (row.slurm_index, row.index, row.since, row.until) == (1, 0, started, None)
