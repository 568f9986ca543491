"""The opt-in hpc_job mapping: MAC's Slurm prolog and epilog (contrib/slurm) on a real lab
node write and clear the per-GPU files, and dcgm-exporter's samples gain `hpc_job`."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import GaugeMetricFamily

from exporters.hpcjob import with_hpc_job
from node.hpcjobs import read_mapping
from testkit.slurmlab import SlurmLab, SlurmLabUnavailable, lab_folder
from testkit.waiting import wait_for

pytestmark = [pytest.mark.slurm]

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "slurm"


@pytest.fixture(scope="module")
def prolog_lab(tmp_path_factory) -> Iterator[tuple[SlurmLab, Path]]:
    """One lab node of four GPUs whose Prolog/Epilog are MAC's, writing under `mapping`."""
    work = tmp_path_factory.mktemp("hpc-job")
    mapping = work / "mapping"
    hooks = {}
    for hook in ("prolog", "epilog"):
        wrapper = work / hook
        wrapper.write_text(
            f"#!/bin/sh\nMAC_HPC_JOB_MAPPING_DIR={mapping} exec {CONTRIB / f'mac-hpc-job-{hook}'}\n"
        )
        wrapper.chmod(0o755)
        hooks[hook.capitalize()] = str(wrapper)
    try:
        with lab_folder() as root:
            lab = SlurmLab.start(root, ["gpu-a"], 4, extra_config={**hooks, "PrologFlags": "Alloc"})
            try:
                yield lab, mapping
            finally:
                lab.stop()
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))


def test_the_prolog_maps_each_gpu_to_its_job_and_the_epilog_clears_it(prolog_lab):
    lab, mapping = prolog_lab
    first = lab.submit(gpus=2, seconds=60)
    second = lab.submit(gpus=1, seconds=60)
    for job in (first, second):
        lab.wait_job(job, "RUNNING")
    wait_for(lambda: len(read_mapping(mapping)) == 3, 10, 0.1, what="three GPU files")

    assert read_mapping(mapping) == {"0": (str(first),), "1": (str(first),), "2": (str(second),)}

    family = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "util", labels=["gpu", "Hostname"])
    for gpu in range(4):
        family.add_metric([str(gpu), "gpu-a"], 50.0 + gpu)
    (labelled,) = with_hpc_job([family], read_mapping(mapping))
    jobs = {s.labels["gpu"]: s.labels.get("hpc_job") for s in labelled.samples}
    assert jobs == {"0": str(first), "1": str(first), "2": str(second), "3": None}

    lab.run("scancel", str(first))
    lab.wait_job(first, "CANCELLED")
    wait_for(lambda: "0" not in read_mapping(mapping), 10, 0.1, what="the epilog")
    assert read_mapping(mapping) == {"2": (str(second),)}
    assert sorted(path.name for path in mapping.iterdir()) == ["2"]


def test_a_missing_mapping_folder_is_no_job(tmp_path):
    assert read_mapping(tmp_path / "absent") == {}


def _hook(name: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Run the prolog or epilog as slurmd does: its variables, nothing of this machine's."""
    return subprocess.run(
        [str(CONTRIB / f"mac-hpc-job-{name}")],
        env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "0,2",
             "MAC_NODE_ENV_FILE": str(tmp_path / "absent-env"), **env},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_a_folder_it_cannot_create_never_fails_the_job(tmp_path):
    """A prolog that exits non-zero drains the node and requeues the job: for a label."""
    (tmp_path / "a-file").write_text("")
    done = _hook("prolog", tmp_path, MAC_HPC_JOB_MAPPING_DIR=str(tmp_path / "a-file" / "jobs"))
    assert done.returncode == 0
    assert "cannot create" in done.stderr and "4242" in done.stderr
    assert (
        _hook("epilog", tmp_path, MAC_HPC_JOB_MAPPING_DIR=str(tmp_path / "a-file")).returncode == 0
    )


@pytest.mark.parametrize(
    "line",
    ['MAC_HPC_JOB_MAPPING_DIR="{dir}"', "MAC_HPC_JOB_MAPPING_DIR='{dir}'",
     "export MAC_HPC_JOB_MAPPING_DIR={dir}", "MAC_HPC_JOB_MAPPING_DIR={dir}"],
)  # fmt: skip
def test_the_folder_is_read_from_the_env_file_as_mac_writes_it(tmp_path, line):
    folder = tmp_path / "jobs"
    env_file = tmp_path / "env"
    env_file.write_text("MASTER_IP=10.0.0.1\n" + line.format(dir=folder) + "\n")

    assert _hook("prolog", tmp_path, MAC_NODE_ENV_FILE=str(env_file)).returncode == 0
    assert read_mapping(folder) == {"0": ("4242",), "2": ("4242",)}
    assert _hook("epilog", tmp_path, MAC_NODE_ENV_FILE=str(env_file)).returncode == 0
    assert read_mapping(folder) == {}
