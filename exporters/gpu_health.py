"""The GPU verdicts as metric families, beside dcgm-exporter's and rocm-exporter's own series.

One ``mac_gpu_health`` sample per GPU, labelled like the exporter's other GPU series
(DCGM's ``gpu``, ``UUID``... or AMD's ``gpu_id``, ``gpu_uuid``...) plus ``state`` and
``action``, valued by the state's severity; one ``mac_gpu_health_evidence`` sample per
piece of evidence, valued by the Unix time it was seen; and ``mac_node_boot_info``, the
boot the verdicts belong to. The names and their meaning are the contract's
(contract.verdicts); the judging is node.gpu.health's. exporters/README.md lists them
beside the DCGM names.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from contract.verdicts import BOOT_METRIC, EVIDENCE_METRIC, HEALTH_METRIC, GpuVerdict
from exporters.runtime import BackendStatus, Options
from node.config import node_config
from node.gpu.evidence_state import EvidenceState, state_file_name
from node.gpu.health import WINDOW_SETTING

log = logging.getLogger("exporters")


def evidence_window(options: Options) -> float:
    """MAC_GPU_EVIDENCE_WINDOW from the node's settings; a bad value is logged, not fatal."""
    return node_config(options.roots).value_or_default(WINDOW_SETTING, log.error)


def evidence_file(options: Options, service: str) -> Path | None:
    """Where ``service`` keeps its GPUs' evidence across restarts (--state-dir); None
    where no folder was given: nothing is kept."""
    if options.state_dir is None:
        return None
    return options.state_dir / state_file_name(service)


def evidence_backend(state: EvidenceState) -> BackendStatus:
    """``mac_exporter_backend_available{backend="evidence_state"}``: whether the evidence
    outlives a restart of the exporter, and why not."""
    problem = state.problem()
    return BackendStatus("evidence_state", not problem, problem)


def verdict_families(
    verdicts: Iterable[tuple[list[str], GpuVerdict]], labels: list[str], boot_id: str
) -> list[Metric]:
    """The three verdict families for (label values, verdict) of each GPU."""
    health = GaugeMetricFamily(
        HEALTH_METRIC,
        "Health verdict of the GPU: 0 healthy, 1 degraded, 2 unhealthy; the labels state "
        "and action say which, and the repair MAC suggests.",
        labels=[*labels, "state", "action"],
    )
    evidence = GaugeMetricFamily(
        EVIDENCE_METRIC,
        "One piece of evidence behind the GPU's verdict (value: Unix time it was seen).",
        labels=[*labels, "source", "code", "state", "action", "detail"],
    )
    for values, verdict in verdicts:
        health.add_metric([*values, verdict.state, verdict.action], verdict.state.severity)
        for item in verdict.evidence:
            evidence.add_metric(
                [*values, item.source, item.code, item.state, item.action, item.detail], item.at
            )
    boot = GaugeMetricFamily(
        BOOT_METRIC, "The node's current boot (the kernel's boot_id); always 1.", labels=["boot_id"]
    )
    boot.add_metric([boot_id], 1.0)
    return [health, evidence, boot]
