"""A job's report: its nodes and GPUs, their metrics over its life, the faults that touched them.

What the job page (/jobs/<id>/) and its API (/api/v1/jobs/<id>/) show, built from job
attribution (scheduler.jobread: which GPUs the job held, from when to when, by the index
the exporters give them, which the read mapped Slurm's own index to), the
GPU verdicts (GpuFault, GpuHealth) and the metrics store. The charts ask Prometheus'
query_range as the node page's charts do (macweb.dashboard.charts: the same queries,
the same MAC_PROMETHEUS_URL, which is the store every shard writes to under
MAC_SCRAPE_SHARDS), narrowed to exactly the job's GPUs: `node="<id>",gpu=~"0|1"`.

Who sees what: staff every job, a plain user the jobs Slurm ran as their user name.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import aiohttp
from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from alerting import bulkheads
from contract.verdicts import Evidence
from inventory.choices import EventKind, GpuVendor, HealthState
from inventory.models import GpuFault, GpuHealth, Node, NodeEvent
from macweb.dashboard import charts
from scheduler.models import Job

# The GPU charts of the node page that a job's report repeats.
JOB_CHARTS = ("gpu_util", "gpu_memory", "gpu_power", "gpu_temp")
# Points per series at most: the step grows with the job's length (a 24 h job: 300 s).
MAX_POINTS = 300
# A fault seen just before a job failed reaches the history at the next sweep, after the
# job's end: the history is read this long past it (the evidence's own time decides).
SWEEP_LAG = timedelta(minutes=10)
VERDICT_EVENTS = (EventKind.HEALTH_HEALTHY, EventKind.HEALTH_DEGRADED, EventKind.HEALTH_UNHEALTHY)
MIN_STEP = 15
# The label that numbers a GPU in each vendor's exporter (dcgm-exporter, AMD's).
GPU_LABEL = {GpuVendor.NVIDIA: "gpu", GpuVendor.AMD: "gpu_id"}
ENDINGS = {
    "FAILED": "failed",
    "CANCELLED": "was cancelled",
    "TIMEOUT": "timed out",
    "NODE_FAIL": "lost its node",
    "OUT_OF_MEMORY": "ran out of memory",
    "PREEMPTED": "was preempted",
}


def visible_jobs(user) -> QuerySet[Job]:
    """The jobs `user` may see: all for staff, else those Slurm ran as their user name."""
    if user.is_staff:
        return Job.objects.all()
    return Job.objects.filter(user=user.get_username())


@dataclass
class JobReport:
    job: Job
    start: datetime
    end: datetime
    gpus: list[dict] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)
    charts: list[dict] = field(default_factory=list)
    summary: str = ""


def build_report(job: Job, now: datetime | None = None) -> JobReport:
    """Everything of the report (the charts ask the metrics store)."""
    now = now or timezone.now()
    start = job.started or job.submitted or now
    end = job.ended or now
    report = JobReport(job, start, max(end, start))
    report.gpus = job_gpus(job)
    report.faults = job_faults(report)
    report.charts = job_charts(report)
    report.summary = summary(report)
    return report


def job_gpus(job: Job) -> list[dict]:
    """The GPUs the job held: node, index (the exporters' and GpuHealth's: the UUID, the
    faults and the charts' `gpu` label match it), Slurm's index, UUID, from when to when."""
    rows = list(job.gpus.select_related("node").order_by("slurm_node", "index"))
    uuids = {
        (gpu.node_id, gpu.index): gpu.uuid
        for gpu in GpuHealth.objects.filter(node_id__in={row.node_id for row in rows})
    }
    return [
        {
            "node": row.node_id,
            "hostname": row.node.hostname if row.node else row.slurm_node,
            "slurm_node": row.slurm_node,
            "index": row.index,
            "slurm_index": row.index if row.slurm_index is None else row.slurm_index,
            "uuid": uuids.get((row.node_id, row.index), ""),
            "since": row.since,
            "until": row.until,
        }
        for row in rows
    ]


def job_faults(report: JobReport) -> list[dict]:
    """Every fault recorded on the job's GPUs while it ran, oldest first: the repeat-fault
    records (GpuFault), the evidence of every verdict the nodes' history kept (degraded
    evidence too, and faults that have cleared since), and the verdicts' evidence now."""
    gpus = {(gpu["node"], gpu["index"]): gpu for gpu in report.gpus if gpu["node"] is not None}
    nodes = {node for node, _ in gpus}
    found: dict[tuple, dict] = {}

    def add(node: int, index: int, at: datetime, detail: str, state: str) -> None:
        gpu = gpus.get((node, index))
        if gpu is None or not gpu["since"] <= at <= (gpu["until"] or report.end):
            return
        key = (node, index, detail)
        # the evidence's own time is the fault's; a GpuFault or an event has the sweep's
        if key not in found or at < found[key]["at"]:
            found[key] = _fault(gpu, at, detail, state)

    recorded = GpuFault.objects.filter(
        node_id__in=nodes, first_seen__lte=report.end, last_seen__gte=report.start
    )
    for fault in recorded:
        gpu = gpus.get((fault.node_id, fault.gpu_index))
        held = gpu and fault.first_seen <= (gpu["until"] or report.end)
        if held and fault.last_seen >= gpu["since"]:
            key = (fault.node_id, fault.gpu_index, fault.detail)
            found.setdefault(key, _fault(gpu, fault.first_seen, fault.detail, ""))
    history = NodeEvent.objects.filter(
        node_id__in=nodes, kind__in=VERDICT_EVENTS, created_at__gte=report.start,
        created_at__lte=report.end + SWEEP_LAG,
    )  # fmt: skip
    for event in history:
        for gpu in (event.data or {}).get("gpus", []):
            for evidence, at in _readable(gpu.get("found", [])):
                index = str(gpu.get("index"))  # GpuVerdict.index: the exporter's, as text
                if index.isascii() and index.isdigit():  # not "²", nor "٣" (int() says 3)
                    at = at or event.created_at
                    add(event.node_id, int(index), at, evidence.detail, str(evidence.state))
    for verdict in GpuHealth.objects.filter(node_id__in=nodes):
        for evidence, at in _readable(verdict.evidence or []):
            if at:
                add(verdict.node_id, verdict.index, at, evidence.detail, str(evidence.state))
    return sorted(found.values(), key=lambda fault: (fault["at"], fault["hostname"], fault["gpu"]))


def _readable(items: list) -> Iterator[tuple[Evidence, datetime | None]]:
    """Each piece of evidence with its time (None when unknown). One this release cannot
    read (written by another release or by hand: an unknown state or action, a bad time,
    not an object) is left out rather than failing the report."""
    for item in items:
        try:
            evidence = Evidence.from_dict(item)
            at = datetime.fromtimestamp(evidence.at, UTC) if evidence.at else None
        except (AttributeError, TypeError, ValueError, OverflowError, OSError):
            continue
        yield evidence, at


def _fault(gpu: dict, at: datetime, detail: str, state: str) -> dict:
    return {
        "at": at,
        "hostname": gpu["hostname"],
        "node": gpu["node"],
        "gpu": gpu["index"],
        "detail": detail,
        "state": state or HealthState.UNHEALTHY.value,
    }


def step_for(start: datetime, end: datetime) -> int:
    seconds = max((end - start).total_seconds(), 1.0)
    return max(MIN_STEP, math.ceil(seconds / MAX_POINTS))


def job_charts(report: JobReport) -> list[dict]:
    """For each GPU chart: one series per GPU of the job, over the job's life (the
    queries of all charts asked at once, on an event loop of this call's own)."""
    by_node: dict[int, list[int]] = {}
    for gpu in report.gpus:
        if gpu["node"] is not None:
            by_node.setdefault(gpu["node"], []).append(gpu["index"])
    nodes = Node.objects.in_bulk(list(by_node))
    start, end = report.start.timestamp(), report.end.timestamp()
    step = step_for(report.start, report.end)
    # Nodes where the job holds the same indexes share one query per chart (node=~"..."):
    # a 64-GPU job on 8 full nodes asks 4 queries, not 32.
    groups: dict[tuple[str, tuple[int, ...]], list[Node]] = {}
    for node_id, indexes in sorted(by_node.items()):
        node = nodes.get(node_id)
        if node is not None and node.gpu_vendor in GPU_LABEL:
            groups.setdefault((node.gpu_vendor, tuple(sorted(indexes))), []).append(node)
    win = charts.rate_window(step)
    plans = []  # (chart spec, [queries])
    for name in JOB_CHARTS:
        spec = charts.CHARTS[name]
        queries = []
        for (vendor, indexes), members in groups.items():
            node_match = "|".join(str(node.pk) for node in members)
            gpu_match = "|".join(str(index) for index in indexes)
            sel = f'node=~"{node_match}",{GPU_LABEL[vendor]}=~"{gpu_match}"'
            for query in spec.queries.get(vendor, ()):
                queries.append(charts.Query(query.expr.format(sel=sel, win=win), query.legend))
        plans.append((spec, queries))
    hostnames = {str(node.pk): node.hostname for node in nodes.values()}
    flat = [query for _, queries in plans for query in queries]
    results, error = asyncio.run(_ask(flat, start, end, step))
    answers, position = [], 0
    for spec, queries in plans:
        mine = results[position : position + len(queries)] if results else [[]] * len(queries)
        position += len(queries)
        grid, series = charts.build_columns(by_host(queries, mine, hostnames), start, end, step)
        has_data = any(v is not None for s in series for v in s["values"])
        answers.append(
            {
                "chart": spec.name,
                "title": spec.title,
                "unit": spec.unit,
                "step": step,
                "queries": [q.expr for q in queries],
                "timestamps": grid if has_data else [],
                "series": series if has_data else [],
                "empty_reason": error
                or (None if has_data else "No samples of these GPUs during the job."),
            }
        )
    return answers


def by_host(
    queries: list[charts.Query], results: list[list[dict]], hostnames: dict[str, str]
) -> list[tuple[charts.Query, list[dict]]]:
    """Each query's result split by node, its legend prefixed with the node's host name,
    so that a line reads "gpu-12 GPU 3"."""
    pairs = []
    for query, result in zip(queries, results, strict=True):
        per_node: dict[str, list[dict]] = {}
        for item in result:
            per_node.setdefault(item["metric"].get("node", ""), []).append(item)
        for node, items in sorted(per_node.items()):
            legend = f"{hostnames.get(node, node)} {query.legend}"
            pairs.append((charts.Query(query.expr, legend), items))
    return pairs


async def _ask(
    queries: list[charts.Query], start: float, end: float, step: int
) -> tuple[list[list[dict]], str | None]:
    """Every query's result from the metrics store, or why there is none."""
    if not queries:
        return [], "No GPU of this job is on a node MAC monitors."
    base = settings.PROMETHEUS_URL.rstrip("/")
    timeout = aiohttp.ClientTimeout(total=settings.DASHBOARD_PROMETHEUS_TIMEOUT)
    try:
        with bulkheads.PROMETHEUS.slot():
            async with aiohttp.ClientSession(timeout=timeout) as session:
                results = await asyncio.gather(
                    *(charts._query_range(session, base, q.expr, start, end, step) for q in queries)
                )
    except bulkheads.BulkheadFull as exc:
        return [], f"Not asked: {exc}."
    except charts.PrometheusError as exc:
        return [], charts.store_said(base, str(exc))
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return [], charts.store_said(base, f"did not answer ({exc or 'timeout'}).")
    return list(results), None


def mean_utilisation(report: JobReport) -> float | None:
    chart = next((c for c in report.charts if c["chart"] == "gpu_util"), None)
    values = [v for s in (chart or {}).get("series", []) for v in s["values"] if v is not None]
    return sum(values) / len(values) if values else None


def _clock(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%H:%M")


def summary(report: JobReport) -> str:
    """The report in one line: how many GPUs, how busy, and the first fault if any."""
    job = report.job
    count = len(report.gpus) or job.gpu_count
    unhealthy = [f for f in report.faults if f["state"] == HealthState.UNHEALTHY.value]
    first = (unhealthy or report.faults or [None])[0]
    if first is not None:
        what = first["detail"].split(":", 1)[0]
        line = f"GPU {first['gpu']} of {first['hostname']} had {what} at {_clock(first['at'])}"
        if job.ended:
            minutes = max(0, round((job.ended - first["at"]).total_seconds() / 60))
            ending = ENDINGS.get(job.state, "ended")
            return f"{line}, {minutes} minutes before the job {ending}"
        return f"{line}, while the job ran"
    gpus_words = f"{count} GPU{'s' if count != 1 else ''}"
    if not report.gpus and count:
        # seen only after its end (sacct, or squeue's memory): Slurm keeps no indexes then
        where = ", ".join(job.nodes) or "unknown nodes"
        return (
            f"{gpus_words} on {where}; which ones is not known "
            "(it started and ended between two reads of Slurm)"
        )
    parts = [gpus_words]
    mean = mean_utilisation(report)
    if mean is not None:
        parts.append(f"mean utilisation {mean:.0f} %")
    parts.append("no hardware fault")
    return ", ".join(parts)
