"""dcgm-exporter's HPC job mapping: a folder with one file per GPU index, each holding the
ids of the jobs on that GPU, one a line, written by the scheduler's prolog and epilog
(MAC ships them: contrib/slurm/mac-hpc-job-prolog and mac-hpc-job-epilog).

Read only where a site opts in (MAC_HPC_JOB_MAPPING_DIR): the master's job attribution
(mac_gpu_job_info) is the default, because this label repeats every GPU series per job.
"""

from __future__ import annotations

from pathlib import Path


def read_mapping(folder: Path) -> dict[str, tuple[str, ...]]:
    """{GPU index: job ids} from the mapping folder; {} when it is missing or unreadable."""
    mapping: dict[str, tuple[str, ...]] = {}
    try:
        entries = list(folder.iterdir())
    except OSError:
        return mapping
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            jobs = tuple(line.strip() for line in entry.read_text().splitlines() if line.strip())
        except OSError:
            continue  # the epilog removed it between the listing and the read
        if jobs:
            mapping[entry.name] = jobs
    return mapping
