"""The job page (/jobs/<id>/) and its API (/api/v1/jobs/<id>/): thin adapters over jobreport.

A job that is not there and a job that is someone else's answer the same 404, so a
plain user cannot learn which job ids exist.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from macweb.dashboard.jobreport import build_report, visible_jobs
from scheduler.models import Job


def visible_job(user, job_id: int) -> Job:
    job = visible_jobs(user).filter(job_id=job_id).first()
    if job is None:
        raise Http404(f"no job {job_id} that you may see")
    return job


@login_required
@require_GET
def job_page(request: HttpRequest, job_id: int) -> HttpResponse:
    """One job: summary, nodes and GPUs, faults, and its GPUs' charts over its life."""
    report = build_report(visible_job(request.user, job_id))
    for chart in report.charts:
        chart["gpus"] = [
            {
                "label": series["label"],
                "mean": _mean(series["values"]),
                "max": max((v for v in series["values"] if v is not None), default=None),
            }
            for series in chart["series"]
        ]
    return render(
        request,
        "dashboard/job.html",
        {
            "report": report,
            "job": report.job,
            # what job.js draws: the same columns as the API's charts
            "chart_data": [
                {key: chart[key] for key in ("chart", "unit", "timestamps", "series")}
                for chart in report.charts
            ],
        },
    )


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


class JobGpuSerializer(serializers.Serializer):
    node = serializers.IntegerField(allow_null=True, help_text="MAC's node id; null: not monitored")
    hostname = serializers.CharField()
    slurm_node = serializers.CharField(help_text="Slurm's NodeName")
    index = serializers.IntegerField(
        help_text="the GPU index as the exporters number it (dcgm-exporter's `gpu` label)"
    )
    slurm_index = serializers.IntegerField(
        help_text="the same GPU in Slurm's numbering (its GRES IDX, by device file); it "
        "differs from `index` where NVML's order (PCI bus) does not follow the device files"
    )
    uuid = serializers.CharField(allow_blank=True)
    since = serializers.DateTimeField()
    until = serializers.DateTimeField(allow_null=True, help_text="null while the job holds it")


class JobFaultSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    hostname = serializers.CharField()
    node = serializers.IntegerField()
    gpu = serializers.IntegerField()
    detail = serializers.CharField(help_text='the evidence, e.g. "XID 48: ..."')
    state = serializers.CharField(help_text="the verdict it gave: degraded or unhealthy")


class JobSeriesSerializer(serializers.Serializer):
    label = serializers.CharField(help_text='"<hostname> GPU <index>"')
    values = serializers.ListField(child=serializers.FloatField(allow_null=True))


class JobChartSerializer(serializers.Serializer):
    chart = serializers.CharField()
    title = serializers.CharField()
    unit = serializers.CharField()
    step = serializers.IntegerField()
    queries = serializers.ListField(child=serializers.CharField())
    timestamps = serializers.ListField(child=serializers.FloatField())
    series = JobSeriesSerializer(many=True)
    empty_reason = serializers.CharField(allow_null=True)


class JobReportSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(source="job.job_id")
    slurm_id = serializers.CharField(
        source="job.shown_id", help_text='Slurm\'s own JobID: "123_4", "123+1", or the job id'
    )
    name = serializers.CharField(source="job.name")
    user = serializers.CharField(source="job.user")
    account = serializers.CharField(source="job.account")
    partition = serializers.CharField(source="job.partition")
    state = serializers.CharField(source="job.state")
    nodes = serializers.ListField(source="job.nodes", child=serializers.CharField())
    gpu_count = serializers.IntegerField(source="job.gpu_count")
    submitted = serializers.DateTimeField(source="job.submitted", allow_null=True)
    started = serializers.DateTimeField(source="job.started", allow_null=True)
    ended = serializers.DateTimeField(source="job.ended", allow_null=True)
    summary = serializers.CharField()
    gpus = JobGpuSerializer(many=True)
    faults = JobFaultSerializer(many=True)
    charts = JobChartSerializer(many=True)


class JobReportView(APIView):
    """A Slurm job's report: its GPUs, their metrics over its life, the faults on them."""

    @extend_schema(
        operation_id="jobs_retrieve",
        responses={
            200: JobReportSerializer,
            401: OpenApiResponse(description="no session and no valid API token"),
            403: OpenApiResponse(description="not logged in, and no API token offered"),
            404: OpenApiResponse(description="no such job, or not one of the user's own"),
        },
        description="Staff see every job; a plain user only the jobs Slurm ran as their "
        "user name (404 for any other). Charts: utilisation, memory, power and temperature "
        "of exactly the job's GPUs, from the metrics store.",
    )
    def get(self, request: Request, job_id: int) -> Response:
        report = build_report(visible_job(request.user, job_id))
        return Response(JobReportSerializer(report).data)
