"""The guide's hardest failure for real: IPv4 forwarding off on an agent, in network namespaces.

Recipe of ARCHITECTURE.md: namespaces master, agent and ctr; veth master<->agent
(198.18.0.1/24, 198.18.0.2/24) and agent<->ctr (198.19.0.1/24, 198.19.0.2/24,
default route in ctr via the agent); in agent, port 29101 is DNAT'd to the
"container" 198.19.0.2 where sys-exporter listens, while nic-exporter listens on
the agent itself (host network). The sweep's probe runs inside the master
namespace (`ip netns exec ... python -m testkit.probe_runner`); its results are
judged and saved by the ordinary sweep in the test process.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from healthcheck.sweep import run_sweep
from inventory.choices import Diagnosis, NodeStatus, StatusReason
from inventory.models import Node
from testkit.netns import AGENT_IP, CTR_IP, forwarding_off_lab, sh
from testkit.probe_runner import probes_from_json
from tests.conftest import netns_marks
from tests.healthcheck.conftest import PYTHON, REPO, wait_ready

pytestmark = netns_marks("ip", "iptables")


@pytest.fixture
def namespaces(processes):
    """The lab of tests/netns.py with the two exporters of the simulated fleet in it."""
    with forwarding_off_lab("s") as names:
        try:
            servers = [
                (names["ctr"], CTR_IP, "sys-exporter"),  # the bridge exporter, behind DNAT
                (names["agent"], AGENT_IP, "nic-exporter"),  # host network
            ]
            for ns, ip, service in servers:
                child = processes.start(
                    f"{service}-{ns}",
                    ["ip", "netns", "exec", ns, PYTHON, "-m", "testkit.simfleet",
                     "--ip", ip, "--services", service],
                    env=None,
                )  # fmt: skip
                wait_ready(child)
            yield names
        finally:
            processes.stop_all()


def probe_in(namespace: str):
    """A probe function for run_sweep that runs the real probe inside `namespace`."""

    def probe(targets):
        out = subprocess.run(
            ["ip", "netns", "exec", namespace, PYTHON, "-m", "testkit.probe_runner",
             "--timeout", "1", *[t.ip for t in targets]],
            cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        results = probes_from_json(json.loads(out.stdout))
        for target, result in zip(targets, results, strict=True):
            result.node_id = target.node_id  # the CLI numbers its arguments 1..N
        return results

    return probe


@pytest.mark.django_db
def test_forwarding_off_is_diagnosed_and_fixing_it_brings_the_node_back(
    namespaces, make_node, sd_dir, sweep_redis
):
    node = make_node("gpu-fwd", AGENT_IP)
    probe = probe_in(namespaces["master"])

    run_sweep(probe=probe)

    node.refresh_from_db()
    assert node.status == NodeStatus.OFFLINE
    assert node.status_reason == StatusReason.TIMEOUT
    assert node.diagnosis == Diagnosis.IP_FORWARD_OFF
    assert node.exporter_health == {"nic-exporter": True, "sys-exporter": False}
    assert not json.loads((sd_dir / "sys-exporter.json").read_text())

    sh("ip", "netns", "exec", namespaces["agent"], "sysctl", "-qw", "net.ipv4.ip_forward=1")
    run_sweep(probe=probe)

    node = Node.objects.get(pk=node.pk)
    assert (node.status, node.status_reason, node.diagnosis) == ("online", "ok", "")
    targets = json.loads((sd_dir / "sys-exporter.json").read_text())
    assert targets[0]["targets"] == [f"{AGENT_IP}:29101"]
