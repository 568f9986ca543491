"""What a sweep reads of each node's GPU verdicts, off the probes it already made.

The liveness GET of a node's dcgm-exporter or rocm-exporter asks for the verdict lines
(contract.services: the probe query) and keeps the answer (contract.liveness). Here each
node's answers become an inventory.services.health.Observation: observed or not, the
answers' fingerprint, and the answers themselves only when the fingerprint moved, so an
unchanged fleet costs a hash per node and no parse (docs/probing.md, "GPU verdicts").
"""

from __future__ import annotations

from contract.liveness import NodeProbe
from contract.services import VERDICT_SERVICES
from contract.verdicts import BOOT_METRIC, answer_digest
from inventory.services.health import Observation

_BOOT_LINE = f"{BOOT_METRIC}{{".encode()


def observe(row: dict, probe: NodeProbe | None) -> Observation:
    """One node's verdict answers in this sweep (see the module docstring)."""
    node_id = row["id"]
    if probe is None or not probe.sys.ok:
        return Observation(node_id, False)  # the node did not answer
    reported = row.get("exporters") or {}
    answers = []
    for service in VERDICT_SERVICES:
        if service.name not in reported:
            continue
        result = probe.results.get(service.name)
        if result is None or not result.ok or result.answer is None:
            return Observation(node_id, False)  # the GPU exporter did not answer
        if _BOOT_LINE not in result.answer:
            # An agent older than the verdicts, or no GPU library to judge with.
            return Observation(node_id, False)
        answers.append((service.gpu_vendor, result.answer, result.cut))
    if not answers:
        return Observation(node_id, True, digest="")  # no GPU exporter: nothing to judge
    fingerprint = b"\0".join(body for _, body, _ in answers) + str(row.get("gpu_count")).encode()
    digest = answer_digest(fingerprint)
    if digest == row.get("health_digest"):
        return Observation(node_id, True, digest=digest)
    return Observation(node_id, True, digest=digest, answers=answers)
