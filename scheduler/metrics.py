"""The drain's figures on the master's /metrics (healthcheck.metrics adds them).

    mac_slurm_drain_decisions_total{decision, dry_run}   decisions recorded in the nodes'
        histories: drain, reboot, reason, resume, over_budget, held, unknown, refused
    mac_slurm_up                    1 when slurmctld answered the last drain pass, else 0
    mac_slurm_drain_budget_nodes    the most nodes MAC may keep drained (MAC_DRAIN_BUDGET)
    mac_slurm_drained_nodes         nodes MAC keeps drained (or would, in a dry run)
    mac_slurm_drain_held_back_nodes unhealthy nodes left in service by the budget

Read from the cache the worker's passes write: one read per scrape, no call to Slurm.
Nothing while MAC_SLURM_DRAIN is off.

Job attribution (scheduler.jobread), whenever it has recorded jobs:

    mac_gpu_job_info{Hostname, gpu, UUID, job_id, user, partition}   1 per GPU a job
        holds now; dashboards join it on the GPU series (dcgm-exporter's Hostname, gpu
        and UUID labels) instead of multiplying every GPU series by a job label. `gpu` is
        the exporter's index of the GPU (NVML's), which the read mapped Slurm's to
        (scheduler.jobread.gpu_order), so the join lands on the GPU the job holds
"""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from contract.drainpolicy import DrainMode
from inventory.models import GpuHealth
from scheduler import link
from scheduler.drainpass import decision_counts, last_budget
from scheduler.jobread import held_gpu_rows


def job_metrics() -> Iterator[Metric]:
    """One info series per GPU in use: which job holds it (docs/jobs.md). Plain rows, not
    model instances: a scrape with 8,000 held GPUs stays cheap (bench/slurm_jobs.py)."""
    info = GaugeMetricFamily(
        "mac_gpu_job_info",
        "1 for each GPU a Slurm job holds now (gpu: the exporter's index); join on Hostname, "
        "gpu, UUID.",
        labels=["Hostname", "gpu", "UUID", "job_id", "user", "partition"],
    )
    held = list(held_gpu_rows())
    gpus = GpuHealth.objects.filter(node_id__in={row[0] for row in held})
    uuids = {(n, i): uuid for n, i, uuid in gpus.values_list("node_id", "index", "uuid")}
    for node, index, hostname, job_id, user, partition in held:
        labels = [hostname, str(index), uuids.get((node, index), "")]
        info.add_metric([*labels, str(job_id), user, partition], 1.0)
    yield info


def drain_metrics() -> Iterator[Metric]:
    if settings.SLURM_DRAIN == DrainMode.OFF:
        return
    decisions = CounterMetricFamily(
        "mac_slurm_drain_decisions",
        "Decisions of MAC's drain in Slurm recorded in the nodes' histories, by decision; "
        'dry_run="true" for what a dry run would have done.',
        labels=["decision", "dry_run"],
    )
    for (decision, dry_run), count in sorted(decision_counts().items()):
        decisions.add_metric([decision, "true" if dry_run else "false"], count)
    yield decisions
    state = link.load()
    if state is not None:
        yield GaugeMetricFamily(
            "mac_slurm_up",
            "1 when slurmctld answered the last drain pass, 0 when it did not.",
            value=1.0 if state.reachable else 0.0,
        )
    budget = last_budget()
    if budget:
        yield GaugeMetricFamily(
            "mac_slurm_drain_budget_nodes",
            "The most nodes MAC may keep drained at once (MAC_DRAIN_BUDGET of its Slurm nodes).",
            value=budget["limit"],
        )
        yield GaugeMetricFamily(
            "mac_slurm_drained_nodes",
            "Nodes MAC keeps drained in Slurm (would keep, in a dry run).",
            value=budget["drained"],
        )
        yield GaugeMetricFamily(
            "mac_slurm_drain_held_back_nodes",
            "Unhealthy nodes MAC left in service because its drain budget was spent.",
            value=len(budget["held_back"]),
        )
