"""The probe runner's JSON: a probe made in another namespace comes back as it was."""

from __future__ import annotations

import json

from contract.liveness import NodeProbe, ProbeResult
from contract.outcomes import Outcome
from testkit.probe_runner import probes_from_json, probes_to_json


def test_results_with_a_verdict_answer_survive_the_trip():
    node = NodeProbe(7, "198.18.0.7")
    node.results["sys-exporter"] = ProbeResult("sys-exporter", Outcome.OK, 200, "", 0.01)
    node.results["dcgm-exporter"] = ProbeResult(
        "dcgm-exporter", Outcome.OK, 200, "", 0.02, attempts=2,
        answer=b'mac_node_boot_info{boot_id="b"} 1\n\xff', cut=True,
    )  # fmt: skip
    (back,) = probes_from_json(json.loads(json.dumps(probes_to_json([node]))))
    assert back.results == node.results
