"""What a sweep reads of a node's GPU verdicts off its probes (healthcheck.verdicts)."""

from __future__ import annotations

from contract.liveness import NodeProbe, ProbeResult
from contract.outcomes import Outcome
from contract.verdicts import answer_digest
from healthcheck.verdicts import observe

ANSWER = (
    b'mac_gpu_health{gpu="0",state="healthy",action="none"} 0\nmac_node_boot_info{boot_id="b"} 1\n'
)
ROW = {"id": 1, "exporters": {"sys-exporter": 29101, "dcgm-exporter": 29150}, "gpu_count": 1}


def probe(dcgm: ProbeResult | None, sys_ok: bool = True) -> NodeProbe:
    node = NodeProbe(1, "198.18.0.1")
    outcome = Outcome.OK if sys_ok else Outcome.TIMEOUT
    node.results["sys-exporter"] = ProbeResult("sys-exporter", outcome)
    if dcgm is not None:
        node.results["dcgm-exporter"] = dcgm
    return node


def dcgm(answer: bytes | None = ANSWER, outcome: Outcome = Outcome.OK) -> ProbeResult:
    return ProbeResult("dcgm-exporter", outcome, 200, "", 0.01, answer=answer)


def test_a_new_answer_is_handed_over_with_its_fingerprint():
    seen = observe({**ROW, "health_digest": ""}, probe(dcgm()))
    assert seen.observed and seen.answers == [("nvidia", ANSWER, False)]
    assert seen.digest != ""


def test_the_same_answer_again_is_observed_without_the_bytes():
    first = observe({**ROW, "health_digest": ""}, probe(dcgm()))
    again = observe({**ROW, "health_digest": first.digest}, probe(dcgm()))
    assert again.observed and again.answers == [] and again.digest == first.digest
    # The registered GPU count is part of the fingerprint: the missing-GPU rule may change.
    assert observe({**ROW, "gpu_count": 2, "health_digest": first.digest}, probe(dcgm())).answers


def test_nothing_read_keeps_the_last_verdict():
    assert not observe(ROW, None).observed
    assert not observe(ROW, probe(dcgm(), sys_ok=False)).observed
    assert not observe(ROW, probe(dcgm(answer=None, outcome=Outcome.REFUSED))).observed
    assert not observe(ROW, probe(None)).observed
    # An agent older than the verdicts answers its whole page: no boot line, no verdict.
    assert not observe(ROW, probe(dcgm(answer=b"DCGM_FI_DEV_GPU_UTIL 5\n"))).observed


def test_a_node_without_a_gpu_exporter_is_read_as_it_answers():
    plain = {"id": 2, "exporters": {"sys-exporter": 29101}, "gpu_count": 0}
    seen = observe(plain, probe(None))
    assert seen.observed and seen.answers == [] and seen.digest == ""
    assert answer_digest(ANSWER) == answer_digest(bytes(ANSWER))
