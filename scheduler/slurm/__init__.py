"""MAC's client of Slurm's own tools (scontrol, sinfo, squeue, sacct): no Django here.

`SlurmClient` runs the tools; `records` parses what they print into `SlurmNode`,
`SlurmJob` (with each node's GPU indexes), `Reservation`; `errors` says what went
wrong in types a caller can act on. See docs/slurm.md.
"""

from scheduler.slurm.client import SlurmClient
from scheduler.slurm.errors import (
    SlurmCommandRefused,
    SlurmCredentialRefused,
    SlurmError,
    SlurmOutputError,
    SlurmPermissionDenied,
    SlurmToolMissing,
    SlurmUnknownNode,
    SlurmUnreachable,
)
from scheduler.slurm.records import (
    MAC_REASON_PREFIX,
    Controller,
    GpuAllocation,
    Reservation,
    SlurmJob,
    SlurmNode,
)

__all__ = [
    "MAC_REASON_PREFIX",
    "Controller",
    "GpuAllocation",
    "Reservation",
    "SlurmClient",
    "SlurmCommandRefused",
    "SlurmCredentialRefused",
    "SlurmError",
    "SlurmJob",
    "SlurmNode",
    "SlurmOutputError",
    "SlurmPermissionDenied",
    "SlurmToolMissing",
    "SlurmUnknownNode",
    "SlurmUnreachable",
]
