"""A job's report when the metrics store answers, but not with data (a fake store on
loopback); the report with a real store is tests/scheduler/test_jobs_lab.py's."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from scheduler.models import Job, JobGpu
from testkit.factories import online_gpu_node
from testkit.fakehttp import JsonHandler, serving
from testkit.ports import free_port

pytestmark = pytest.mark.django_db
NOW = datetime.now(UTC)
TIMED_OUT = {"status": "error", "errorType": "timeout", "error": "query timed out"}


def gpu_job() -> Job:
    node = online_gpu_node()
    job = Job.objects.create(
        job_id=4242, user="alice", partition="gpu", state="FAILED", nodes=[node.hostname],
        gpu_count=1, started=NOW - timedelta(hours=2), ended=NOW - timedelta(minutes=5),
    )  # fmt: skip
    JobGpu.objects.create(
        job=job, node=node, slurm_node=node.hostname, index=0, since=job.started, until=job.ended
    )
    return job


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (200, b"null", "answered without the expected data (no success status)"),
        (200, b'{"status": "success"}', "answered without the expected data (no result list)"),
        (
            200,
            b'{"status": "success", "data": {"result": [{"metric": {"node": ["1"]}}]}}',
            "answered without the expected data (labels that are not text: {'node': ['1']})",
        ),
        (503, json.dumps(TIMED_OUT).encode(), "could not answer now (HTTP 503: timeout: query"),
    ],
    ids=["null", "no-data", "label-list", "store-timeout"],
)
def test_a_store_answer_without_data_is_each_chart_s_reason(client_staff, status, body, said):
    job = gpu_job()

    class Store(JsonHandler):
        def do_GET(self) -> None:
            self.send_json(status, body)

    with serving(Store) as url, override_settings(PROMETHEUS_URL=url):
        page = client_staff.get(f"/jobs/{job.job_id}/")
        api = client_staff.get(f"/api/v1/jobs/{job.job_id}/")

    assert page.status_code == api.status_code == 200
    reasons = {chart["empty_reason"] for chart in api.json()["charts"]}
    assert len(reasons) == 1, reasons
    reason = reasons.pop()
    assert reason.startswith(f"Prometheus at {url} {said}"), reason
    assert all(chart["series"] == [] for chart in api.json()["charts"])
    assert f"Prometheus at {url} {said}" in page.content.decode().replace("&#x27;", "'")


def test_gpu_evidence_this_release_cannot_read_leaves_the_report_whole(client_staff, settings):
    """Evidence written by another release or by hand (an unknown state, a bad time): the
    report leaves that item out and shows the rest, never a 500."""
    from contract.verdicts import Evidence, HealthAction, HealthState
    from inventory.choices import EventKind
    from inventory.models import GpuHealth, NodeEvent

    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    job = gpu_job()
    gpu = job.gpus.get()
    at = (NOW - timedelta(hours=1)).timestamp()
    lost = Evidence("xid", "79", "XID 79: GPU has fallen off the bus", HealthState.UNHEALTHY,
                    HealthAction.REBOOT, at, "0")  # fmt: skip
    unreadable = [
        {"detail": "XID 999: a new kind", "state": "melted", "action": "reboot", "at": at},
        {"detail": "XID 48", "state": "unhealthy", "action": "reboot", "at": "soon"},
        {"detail": "XID 48", "state": "unhealthy", "action": "reboot", "at": 1e300},
        "fell off the bus",
    ]
    GpuHealth.objects.create(
        node=gpu.node, index=0, state="unhealthy", action="reboot",
        evidence=[*unreadable, lost.as_dict()],
    )  # fmt: skip
    other = replace(lost, detail="XID 48: on a GPU no index names").as_dict()
    NodeEvent.objects.create(
        node=gpu.node, hostname=gpu.node.hostname, kind=EventKind.HEALTH_UNHEALTHY,
        data={"gpus": [{"index": "0", "found": unreadable}, {"index": "²", "found": [other]},
                       {"index": "\u0660", "found": [other]}]},  # Arabic-Indic 0: int() says 0
    )  # fmt: skip

    page = client_staff.get(f"/jobs/{job.job_id}/")
    api = client_staff.get(f"/api/v1/jobs/{job.job_id}/")

    assert page.status_code == api.status_code == 200
    assert [fault["detail"] for fault in api.json()["faults"]] == [lost.detail]
    assert "XID 79: GPU has fallen off the bus" in page.content.decode()
