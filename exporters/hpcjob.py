"""The `hpc_job` label of dcgm-exporter, an opt-in (MAC_HPC_JOB_MAPPING_DIR): every sample of
a GPU that a job holds is repeated once per job with `hpc_job="<job id>"`, as NVIDIA's
dcgm-exporter does with `--hpc-job-mapping-dir`; a GPU without a job keeps its samples
as they are. The mapping is read with each scrape (node.hpcjobs).

Only dcgm-exporter's own families (DCGM_*) take the label, as in NVIDIA's exporter, all of
whose series are those: MAC's families keep one series per GPU (the verdict's contract,
docs/gpu-health.md), which a GPU shared by two jobs would otherwise double, and a job
starting or ending would change the verdict's answer that the master compares."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

LABEL = "hpc_job"
LABELLED_PREFIX = "DCGM_"


def with_hpc_job(
    families: Iterable[Metric], mapping: Mapping[str, tuple[str, ...]]
) -> list[Metric]:
    """The families with each sample of a mapped GPU (its `gpu` label) once per job."""
    out = []
    for family in families:
        if not family.name.startswith(LABELLED_PREFIX):
            out.append(family)
            continue
        samples = []
        for sample in family.samples:
            jobs = mapping.get(sample.labels.get("gpu", ""), ())
            if not jobs:
                samples.append(sample)
                continue
            samples += [
                Sample(sample.name, {**sample.labels, LABEL: job}, sample.value, sample.timestamp)
                for job in jobs
            ]
        family.samples = samples
        out.append(family)
    return out
