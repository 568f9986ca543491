"""The sweep judges a node by the network mode it registered with (Node.agent_network).

The same probes (sys-exporter black-holed, nic-exporter answering) mean IPv4
forwarding off for a bridge-mode agent and for one older than the mode, and a
blocked or hung port for a host-mode agent, where nothing is DNAT'd.
"""

from __future__ import annotations

import pytest

from healthcheck.sweep import run_sweep
from inventory.choices import AgentNetwork, Diagnosis, NodeStatus
from inventory.models import Node, NodeEvent
from testkit.simfleet import Mode

pytestmark = pytest.mark.django_db


@pytest.fixture
def forwarding_pattern(fleet, fast_probes, sd_dir, sweep_redis):
    """Three simulated agents whose 29101 times out while 29500 answers."""
    runner = fleet(3)
    for index in range(3):
        runner.set_mode(index, "sys-exporter", Mode.BLACKHOLE)
    return runner


def test_it_diagnoses_the_forwarding_pattern_by_the_node_s_network_mode(
    forwarding_pattern, make_node
):
    ips = [node.ip for node in forwarding_pattern.nodes]
    host = make_node(ip=ips[0], agent_network=AgentNetwork.HOST)
    bridge = make_node(ip=ips[1], agent_network=AgentNetwork.BRIDGE)
    older = make_node(ip=ips[2], agent_network=AgentNetwork.UNKNOWN)

    run_sweep()

    got = {n.pk: (n.status, n.diagnosis) for n in Node.objects.all()}
    assert got[host.pk] == (NodeStatus.OFFLINE, Diagnosis.PORT_BLOCKED)
    assert got[bridge.pk] == (NodeStatus.OFFLINE, Diagnosis.IP_FORWARD_OFF)
    assert got[older.pk] == (NodeStatus.OFFLINE, Diagnosis.IP_FORWARD_OFF)
    event = NodeEvent.objects.get(node=host)
    assert event.data["diagnosis"] == Diagnosis.PORT_BLOCKED
    assert "net.ipv4.ip_forward is 0" not in event.message
    assert "not an ip_forward problem" in event.message


def test_a_node_that_re_registers_in_host_mode_is_judged_anew_on_the_next_sweep(
    forwarding_pattern, make_node
):
    node = make_node(ip=forwarding_pattern.nodes[0].ip, agent_network=AgentNetwork.BRIDGE)
    run_sweep()
    assert Node.objects.get(pk=node.pk).diagnosis == Diagnosis.IP_FORWARD_OFF

    Node.objects.filter(pk=node.pk).update(agent_network=AgentNetwork.HOST)
    run_sweep()

    assert Node.objects.get(pk=node.pk).diagnosis == Diagnosis.PORT_BLOCKED
