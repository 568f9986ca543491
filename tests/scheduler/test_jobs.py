"""Job attribution without Slurm: pruning, the task's switch, the report's summary, the API's
answers to people who may not see a job (the lab tests are in test_jobs_lab.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from contract.drainpolicy import DrainMode
from contract.verdicts import Evidence, HealthAction, HealthState
from inventory.choices import EventKind
from inventory.models import GpuFault, GpuHealth, NodeEvent
from macweb.celery import app as celery_app
from macweb.dashboard.jobreport import build_report
from scheduler.jobread import COMPARED_FIELDS, ReadResult, jobs_on_gpu, prune, record
from scheduler.models import Job, JobGpu
from scheduler.slurm.records import GpuAllocation, SlurmJob
from scheduler.tasks import read_slurm_jobs
from testkit.factories import online_gpu_node
from testkit.ports import free_port

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)


def failed_job(node, **fields) -> Job:
    job = Job.objects.create(
        job_id=4242, user="alice", partition="gpu", state="FAILED", nodes=[node.hostname],
        gpu_count=2, started=NOW - timedelta(hours=2), ended=NOW - timedelta(minutes=18),
        **fields,
    )  # fmt: skip
    for index in (2, 3):
        JobGpu.objects.create(
            job=job, node=node, slurm_node=node.hostname, index=index, since=job.started,
            until=job.ended,
        )  # fmt: skip
    return job


def test_it_prunes_jobs_that_ended_before_the_retention(settings):
    settings.METRICS_RETENTION_SECONDS = 15 * 86400
    old = Job.objects.create(job_id=1, state="COMPLETED", ended=NOW - timedelta(days=16))
    Job.objects.create(job_id=2, state="COMPLETED", ended=NOW - timedelta(days=14))
    Job.objects.create(job_id=3, state="RUNNING")

    assert prune(NOW) == 1

    assert sorted(Job.objects.values_list("job_id", flat=True)) == [2, 3]
    assert not Job.objects.filter(pk=old.pk).exists()


def test_the_read_does_nothing_where_the_master_has_no_slurm_conf(settings, tmp_path):
    settings.SLURM_CONF = tmp_path / "absent" / "slurm.conf"

    assert read_slurm_jobs() == {"ran": False, "reason": f"no slurm.conf at {settings.SLURM_CONF}"}


def test_beat_reads_slurm_every_probe_interval(settings):
    entry = celery_app.conf.beat_schedule["read-slurm-jobs"]
    assert entry["task"] == read_slurm_jobs.name == "scheduler.tasks.read_slurm_jobs"
    assert entry["schedule"] == settings.PROBE_INTERVAL


def test_the_jobs_on_a_gpu_are_those_that_held_it_at_that_moment():
    node = online_gpu_node("node-12")
    job = failed_job(node)

    assert jobs_on_gpu(node.pk, 3, NOW - timedelta(hours=1)) == [job]
    assert jobs_on_gpu(node.pk, 1, NOW - timedelta(hours=1)) == []  # not its GPU
    assert jobs_on_gpu(node.pk, 3, NOW - timedelta(minutes=5)) == []  # it had ended


def test_the_summary_names_the_fault_and_how_long_before_the_job_failed(settings):
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    node = online_gpu_node("node-12")
    job = failed_job(node)
    GpuFault.objects.create(
        gpu="1650924060123", fault="xid:48", boot_id="b1", node=node, hostname=node.hostname,
        gpu_index=3, detail="XID 48: double-bit ECC error",
        first_seen=datetime(2026, 12, 3, 14, 2, tzinfo=UTC),
        last_seen=datetime(2026, 12, 3, 14, 2, tzinfo=UTC),
    )  # fmt: skip

    report = build_report(job, now=NOW)

    assert (
        report.summary == "GPU 3 of node-12 had XID 48 at 14:02, 40 minutes before the job failed"
    )
    assert [(f["gpu"], f["detail"]) for f in report.faults] == [(3, "XID 48: double-bit ECC error")]
    # the metrics store is down: every chart says so, none pretends to be empty data
    assert all(
        chart["series"] == [] and "did not answer" in chart["empty_reason"]
        for chart in report.charts
    )


def test_a_store_behind_basic_auth_is_named_without_its_password(settings):
    port = free_port()
    settings.PROMETHEUS_URL = f"http://mac:j0b-secret@127.0.0.1:{port}"
    report = build_report(failed_job(online_gpu_node("node-13")), now=NOW)
    reasons = {chart["empty_reason"] for chart in report.charts}
    assert len(reasons) == 1, reasons
    reason = reasons.pop()
    assert reason.startswith(f"Prometheus at http://127.0.0.1:{port} did not answer"), reason
    assert "j0b-secret" not in reason


def test_a_fault_before_the_job_is_not_its_fault(settings):
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    node = online_gpu_node("node-12")
    job = failed_job(node)
    GpuFault.objects.create(
        gpu="1650924060123", fault="xid:79", boot_id="b0", node=node, hostname=node.hostname,
        gpu_index=3, detail="XID 79: GPU has fallen off the bus",
        first_seen=NOW - timedelta(hours=5), last_seen=NOW - timedelta(hours=4),
    )  # fmt: skip

    report = build_report(job, now=NOW)

    assert report.faults == []
    assert report.summary == "2 GPUs, no hardware fault"


def test_a_degraded_gpu_that_recovered_before_anyone_looked_is_still_in_the_report(settings):
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    node = online_gpu_node("node-12")
    job = failed_job(node)
    hot = Evidence(
        source="throttle", code="thermal", detail="thermal slowdown", state=HealthState.DEGRADED,
        action=HealthAction.NONE, at=(NOW - timedelta(minutes=50)).timestamp(), gpu="2",
    )  # fmt: skip
    # the sweep's history: degraded at 14:10 (recorded a sweep later), healthy again at 14:20
    NodeEvent.objects.create(
        node=node, hostname=node.hostname, kind=EventKind.HEALTH_DEGRADED,
        created_at=NOW - timedelta(minutes=49, seconds=55),
        data={"gpus": [{"index": "2", "state": "degraded", "found": [hot.as_dict()]}]},
    )  # fmt: skip
    NodeEvent.objects.create(
        node=node, hostname=node.hostname, kind=EventKind.HEALTH_HEALTHY,
        created_at=NOW - timedelta(minutes=40), data={"gpus": []},
    )  # fmt: skip
    assert not GpuHealth.objects.filter(node=node).exclude(state="healthy").exists()

    report = build_report(job, now=NOW)

    assert [(f["gpu"], f["detail"], f["state"], f["at"]) for f in report.faults] == [
        (2, "thermal slowdown", "degraded", NOW - timedelta(minutes=50))
    ]
    assert report.summary == (
        "GPU 2 of node-12 had thermal slowdown at 14:10, 32 minutes before the job failed"
    )


def test_the_api_answers_404_for_a_job_that_is_not_yours_or_not_there(
    api_client, django_user_model
):
    node = online_gpu_node("node-12")
    failed_job(node)
    bob = django_user_model.objects.create_user("bob", password="x")
    api_client.force_authenticate(bob)

    assert api_client.get("/api/v1/jobs/4242/").status_code == 404
    assert api_client.get("/api/v1/jobs/999/").status_code == 404
    assert api_client.get("/api/v1/jobs/abc/").json() == {"detail": "Not found."}


def test_the_api_needs_a_login(api_client):
    assert api_client.get("/api/v1/jobs/4242/").status_code in (401, 403)


def test_the_job_api_is_in_the_schema(api_client, staff):
    api_client.force_authenticate(staff)
    schema = api_client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()

    operation = schema["paths"]["/api/v1/jobs/{job_id}/"]["get"]
    assert operation["operationId"] == "jobs_retrieve"
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobReport"
    }
    report = schema["components"]["schemas"]["JobReport"]["properties"]
    assert {"summary", "gpus", "faults", "charts"} <= set(report)


def test_a_job_that_vanished_unseen_ends_when_it_was_last_seen():
    seen = NOW - timedelta(hours=1)
    Job.objects.create(job_id=7, state="RUNNING", started=NOW - timedelta(hours=3), seen=seen)

    record([], [], NOW, ReadResult())

    assert Job.objects.get(job_id=7).ended == seen


def test_the_read_reports_a_slurmctld_that_does_not_answer(settings, tmp_path):
    conf = tmp_path / "slurm.conf"
    port = free_port()
    conf.write_text(
        f"ClusterName=gone\nSlurmctldHost=127.0.0.1\nSlurmctldPort={port}\n"
        "AuthType=auth/munge\nNodeName=n1\nPartitionName=p Nodes=n1\n"
    )
    settings.SLURM_CONF = conf
    settings.SLURM_DRAIN = DrainMode.OFF  # attribution reads Slurm whatever the drain says

    answer = read_slurm_jobs()

    assert answer == {"ran": False, "reason": "scontrol ping: primary at 127.0.0.1 is DOWN"}
    assert not Job.objects.exists()


def test_a_job_seen_only_after_its_end_says_its_gpus_are_not_known(settings):
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    job = Job.objects.create(
        job_id=9, user="bob", state="COMPLETED", nodes=["node-3"], gpu_count=2,
        started=NOW - timedelta(seconds=5), ended=NOW,
    )  # fmt: skip

    report = build_report(job, now=NOW)

    assert report.summary == (
        "2 GPUs on node-3; which ones is not known (it started and ended between two reads "
        "of Slurm)"
    )
    assert report.charts[0]["empty_reason"] == "No GPU of this job is on a node MAC monitors."


def running(job_id: int, node: str, indexes: tuple[int, ...], started: datetime) -> SlurmJob:
    return SlurmJob(
        job_id=job_id, name="train", user="alice", account="", partition="gpu",
        state="RUNNING", nodes=(node,), gpus=(GpuAllocation(node, indexes),),
        gpu_count=len(indexes), submitted=started, started=started, ended=None,
    )  # fmt: skip


def test_a_requeued_job_back_on_the_same_gpus_holds_them_again_from_its_new_start():
    node = online_gpu_node("node-5")
    first, second = NOW - timedelta(hours=1), NOW - timedelta(minutes=2)
    record([running(77, node.hostname, (0, 1), first)], [], first, ReadResult())
    record([], [], NOW - timedelta(minutes=30), ReadResult())  # requeued: gone for a while

    result = ReadResult()
    record([running(77, node.hostname, (0, 1), second)], [], NOW, result)

    rows = JobGpu.objects.filter(job__job_id=77).order_by("index")
    assert [(row.index, row.since, row.until) for row in rows] == [
        (0, second, None), (1, second, None),
    ]  # fmt: skip
    assert result.opened == 2
    assert [job.job_id for job in jobs_on_gpu(node.pk, 1, NOW)] == [77]


def test_a_job_id_slurm_gives_again_is_another_job_and_the_old_keeps_its_history():
    node = online_gpu_node("node-6")
    old_start, old_end = NOW - timedelta(hours=3), NOW - timedelta(hours=2)
    first = running(1001, node.hostname, (0, 1), old_start)
    record([first], [], old_start, ReadResult())
    finished = replace(first, state="COMPLETED", gpus=(), ended=old_end)
    record([], [finished], old_end, ReadResult())  # then slurmctld's state was wiped
    again = replace(running(1001, node.hostname, (0,), NOW), user="bob", name="eval")

    record([again], [], NOW, ReadResult())

    old, new = Job.objects.order_by("started")
    assert (old.user, old.shown_id, old.ended) == ("alice", "1001", old_end)
    assert old.job_id != 1001 and Job.objects.get(job_id=1001) == new
    assert (new.user, new.name, new.ended) == ("bob", "eval", None)
    assert [(r.index, r.since, r.until) for r in old.gpus.order_by("index")] == [
        (0, old_start, old_end), (1, old_start, old_end),
    ]  # fmt: skip
    assert [(r.index, r.since, r.until) for r in new.gpus.all()] == [(0, NOW, None)]
    # A fault on GPU 0 during the first job is the first job's, not the new one's.
    assert jobs_on_gpu(node.pk, 0, old_start + timedelta(minutes=5)) == [old]
    assert jobs_on_gpu(node.pk, 0, NOW) == [new]


def test_a_job_renamed_while_it_runs_is_still_the_same_job():
    node = online_gpu_node("node-7")
    started = NOW - timedelta(hours=1)
    record([running(1002, node.hostname, (3,), started)], [], started, ReadResult())

    renamed = replace(running(1002, node.hostname, (3,), started), name="train-v2")
    record([renamed], [], NOW, ReadResult())

    [job] = Job.objects.all()
    assert (job.job_id, job.name) == (1002, "train-v2")
    assert [(r.index, r.since, r.until) for r in job.gpus.all()] == [(3, started, None)]


def test_a_gpu_held_before_its_node_was_enrolled_is_shown_once_it_is():
    record([running(81, "node-8", (2,), NOW - timedelta(minutes=5))], [], NOW, ReadResult())
    assert JobGpu.objects.get(job__job_id=81).node is None  # MAC does not monitor node-8 yet
    node = online_gpu_node("node-8.dc.example")  # enrolled while the job runs

    record([running(81, "node-8", (2,), NOW - timedelta(minutes=5))], [], NOW, ReadResult())

    assert JobGpu.objects.get(job__job_id=81).node_id == node.pk
    assert [job.job_id for job in jobs_on_gpu(node.pk, 2, NOW)] == [81]


def test_a_read_whose_sacct_failed_leaves_its_window_for_the_next(settings):
    from django.core.cache import cache

    from scheduler.jobread import LAST_READ_KEY, read_jobs
    from scheduler.slurm import SlurmUnreachable

    class Slurm:
        windows: list = []
        answers = [SlurmUnreachable(("sacct",), "slurmdbd is down"), []]

        def ping(self):
            return []

        def jobs(self):
            return []

        def accounting_jobs(self, start):
            self.windows.append(start)
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    cache.set(LAST_READ_KEY, NOW - timedelta(minutes=10), None)
    try:
        slurm = Slurm()
        failed = read_jobs(slurm, now=NOW)
        read_jobs(slurm, now=NOW + timedelta(minutes=1))
        assert not failed.accounting and failed.errors == ["sacct: sacct: slurmdbd is down"]
        # The second window starts where the last answered one ended, not at the failed read.
        assert slurm.windows[1] == NOW - timedelta(minutes=10) - timedelta(seconds=60)
        assert cache.get(LAST_READ_KEY) == NOW + timedelta(minutes=1)
    finally:
        cache.delete(LAST_READ_KEY)


def test_a_runaway_job_slurmdbd_still_calls_running_ends_when_squeue_no_longer_lists_it():
    started = NOW - timedelta(hours=2)
    record([running(91, "node-9", (0,), started)], [], NOW - timedelta(hours=1), ReadResult())
    # slurmctld lost it (a crash); slurmdbd's record still says RUNNING, with no end
    runaway = running(91, "node-9", (), started)

    record([], [runaway], NOW, ReadResult())

    job = Job.objects.get(job_id=91)
    assert job.ended == NOW - timedelta(hours=1)  # when MAC last saw it run
    assert JobGpu.objects.get(job=job).until == job.ended  # its GPU too


def test_an_array_task_is_named_as_slurm_names_it(api_client, staff):
    from dataclasses import replace

    from scheduler.jobread import job_words

    node = online_gpu_node("node-13")
    task = replace(running(130, node.hostname, (0,), NOW), array_job_id=123, array_task_id=4,
                   slurm_id="123_4")  # fmt: skip
    record([task], [], NOW, ReadResult())

    job = Job.objects.get(job_id=130)
    assert (job.slurm_id, job_words(job)) == ("123_4", "job 123_4 (alice)")
    api_client.force_authenticate(staff)
    answer = api_client.get("/api/v1/jobs/130/").json()
    assert (answer["job_id"], answer["slurm_id"]) == (130, "123_4")


def test_a_slurm_name_two_mac_hosts_share_is_left_unmatched_as_the_drain_leaves_it(caplog):
    a, b = online_gpu_node("gpu-01.dc-a"), online_gpu_node("gpu-01.dc-b")
    mine = online_gpu_node("gpu-02.dc-a")
    started = NOW - timedelta(minutes=5)

    with caplog.at_level("WARNING", logger="scheduler.jobread"):
        for _ in range(2):
            record(
                [running(61, "gpu-01", (0,), started), running(62, "gpu-02", (0,), started)],
                [], NOW, ReadResult(),
            )  # fmt: skip

    assert JobGpu.objects.get(job__job_id=61).node is None  # neither host's
    assert JobGpu.objects.get(job__job_id=62).node_id == mine.pk
    assert jobs_on_gpu(a.pk, 0, NOW) == jobs_on_gpu(b.pk, 0, NOW) == []
    said = [r.getMessage() for r in caplog.records if "gpu-01" in r.getMessage()]
    assert said == [
        "Job attribution: MAC's hosts gpu-01.dc-a, gpu-01.dc-b all name Slurm's gpu-01; its "
        "jobs are shown on none of them; give each its own in MAC_SLURM_NODE_MAP"
    ]  # once, not at every read


def test_a_job_missed_until_slurm_forgot_it_does_not_overlap_the_next_job_on_its_gpu():
    node = online_gpu_node("node-14")
    first_seen = NOW - timedelta(hours=2)
    record([running(71, node.hostname, (0,), first_seen)], [], first_seen, ReadResult())
    # the master was away; meanwhile job 71 ended, Slurm forgot it, job 72 took its GPU
    second = running(72, node.hostname, (0,), NOW - timedelta(hours=1))

    record([second], [], NOW, ReadResult())

    old = Job.objects.get(job_id=71)
    assert old.ended == first_seen == JobGpu.objects.get(job=old).until
    assert [job.job_id for job in jobs_on_gpu(node.pk, 0, NOW - timedelta(minutes=30))] == [72]


def test_the_gpus_of_jobs_still_open_are_closed_when_slurm_conf_goes(settings, tmp_path):
    from scheduler.jobread import held_gpu_rows

    node = online_gpu_node("node-15")
    seen = timezone.now() - timedelta(seconds=20)
    record([running(73, node.hostname, (0, 1), seen)], [], seen, ReadResult())
    settings.SLURM_CONF = tmp_path / "absent" / "slurm.conf"  # attribution switched off

    read_slurm_jobs()

    assert list(JobGpu.objects.values_list("until", flat=True)) == [seen, seen]
    assert list(held_gpu_rows()) == []


def test_jobs_no_successful_read_has_seen_lately_are_not_named_as_holding_gpus(settings):
    from scheduler.jobread import STALE_READS, current_jobs, held_gpu_rows

    settings.PROBE_INTERVAL = 30
    node = online_gpu_node("node-16")
    now = timezone.now()
    last = now - timedelta(seconds=30 * STALE_READS + 1)  # then slurmctld stopped answering
    started = last - timedelta(hours=1)
    jobs = [running(74, node.hostname, (0,), started), running(75, node.hostname, (1,), started)]
    record(jobs, [], last, ReadResult())
    # the rows as an outage leaves them: no read closed 74's; one that listed 75 came since
    Job.objects.filter(job_id=75).update(seen=now - timedelta(seconds=30))

    assert [row[3] for row in held_gpu_rows()] == [75]
    assert [row.job.job_id for row in current_jobs([node.pk]).values()] == [75]
    assert jobs_on_gpu(node.pk, 0, now) == []  # a fault now: not job 74's, for all MAC knows
    assert [job.job_id for job in jobs_on_gpu(node.pk, 0, last)] == [74]  # while it was seen
    assert JobGpu.objects.get(job__job_id=74).until is None  # kept, reopened by the next read


# --- what a read keeps, and what it rewrites ---------------------------------------------


def cpu_only(job_id: int, node: str, started: datetime, **fields) -> SlurmJob:
    return replace(running(job_id, node, (), started), gpus=(), gpu_count=0, **fields)


def test_a_cpu_only_job_is_kept_only_on_a_node_mac_monitors():
    node = online_gpu_node("gpu-31.dc")
    started = NOW - timedelta(minutes=5)
    listed = [
        cpu_only(81, "gpu-31", started),  # on MAC's node (its short name)
        cpu_only(82, "cpu-0001", started),  # a CPU partition MAC does not monitor
        running(83, "gpu-elsewhere", (0,), started),  # GPUs, on a node MAC does not monitor
    ]
    result = ReadResult()

    record(listed, [], NOW, result)

    assert sorted(Job.objects.values_list("job_id", flat=True)) == [81, 83]
    assert result.jobs == 2
    assert Job.objects.get(job_id=81).nodes == ["gpu-31"] and node.hostname == "gpu-31.dc"
    assert JobGpu.objects.get(job__job_id=83).node is None


def test_a_cpu_only_job_recorded_before_is_ended_only_once_slurm_no_longer_lists_it():
    seen = NOW - timedelta(minutes=1)
    started = NOW - timedelta(hours=1)
    Job.objects.create(job_id=84, state="RUNNING", nodes=["cpu-0002"], started=started, seen=seen)

    record([cpu_only(84, "cpu-0002", started)], [], NOW, ReadResult())
    assert Job.objects.get(job_id=84).ended is None  # still running, though no longer kept

    record([], [], NOW + timedelta(seconds=30), ReadResult())
    assert Job.objects.get(job_id=84).ended == seen


def _job_writes(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].startswith('INSERT INTO "scheduler_job"')]


def test_a_read_rewrites_only_the_jobs_slurm_changed_and_moves_the_others_seen():
    node = online_gpu_node("node-32")
    started = NOW - timedelta(hours=1)
    jobs = [running(job_id, node.hostname, (job_id - 90,), started) for job_id in (90, 91, 92)]
    record(jobs, [], NOW, ReadResult())
    before = {job.job_id: job for job in Job.objects.all()}
    later = NOW + timedelta(seconds=30)

    with CaptureQueriesContext(connection) as unchanged:
        record(jobs, [], later, ReadResult())

    assert _job_writes(unchanged) == []
    for job in Job.objects.all():  # as a rewrite would have left them
        assert (job.pk, job.seen) == (before[job.job_id].pk, later)
        assert all(
            getattr(job, name) == getattr(before[job.job_id], name) for name in COMPARED_FIELDS
        )

    ended = replace(jobs[1], state="COMPLETED", ended=later + timedelta(seconds=10))
    renamed = replace(jobs[2], name="train-2")
    last = later + timedelta(seconds=30)
    with CaptureQueriesContext(connection) as changed:
        record([jobs[0], renamed], [ended], last, ReadResult())

    assert len(_job_writes(changed)) == 1
    got = {job.job_id: job for job in Job.objects.all()}
    assert (got[91].state, got[91].ended, got[92].name) == ("COMPLETED", ended.ended, "train-2")
    assert {job.seen for job in got.values()} == {last}
    assert JobGpu.objects.get(job__job_id=91).until == ended.ended


def test_a_read_writes_nothing_while_the_node_map_cannot_be_read(settings, tmp_path):
    from django.core.cache import cache

    from scheduler.config import NODE_MAP_ERROR_KEY
    from scheduler.jobread import read_jobs

    settings.SLURM_NODE_MAP = f"@{tmp_path / 'names'}"
    try:
        result = read_jobs(client=None, now=NOW)  # stops before it asks Slurm

        assert result.errors == [cache.get(NODE_MAP_ERROR_KEY)["error"]]
        assert "cannot read" in result.errors[0] and not Job.objects.exists()
    finally:
        cache.delete(NODE_MAP_ERROR_KEY)
