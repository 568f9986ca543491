"""A host cut off the network for real is Offline after one sweep that lasts one timeout.

The agent (the simulated fleet's sys-exporter and nic-exporter) runs in a network
namespace joined to ours by a veth (testkit.hostcut); live simulated nodes on
loopback are swept alongside it. Cutting the host (iptables DROP inside its
namespace) makes every probe of it time out: the ordinary sweep must judge it
Offline in that same sweep, within one probe timeout (the second connection runs
inside the deadline, not in a round after it), and leave the live nodes alone.
"""

from __future__ import annotations

import time

import pytest

from healthcheck.sweep import run_sweep
from inventory.choices import Diagnosis, NodeStatus, StatusReason
from inventory.models import Node
from testkit.hostcut import cut_lab
from tests.conftest import netns_marks
from tests.healthcheck.conftest import PYTHON, wait_ready

TIMEOUT = 1.0
pytestmark = netns_marks("ip", "iptables")


@pytest.fixture
def lab(processes):
    with cut_lab("d") as lab:
        try:
            child = processes.start(
                "agent",
                lab.exec_args(PYTHON, "-m", "testkit.simfleet", "--ip", lab.agent_ip,
                              "--services", "sys-exporter,nic-exporter"),
                env=None,
            )  # fmt: skip
            wait_ready(child)
            yield lab
        finally:
            processes.stop_all()


@pytest.mark.django_db
def test_a_cut_host_is_offline_in_the_first_sweep_after_and_within_one_timeout(
    lab, fleet, make_node, sd_dir, sweep_redis, settings
):
    settings.PROBE_TIMEOUT = TIMEOUT
    cut = make_node("gpu-cut", lab.agent_ip)
    runner = fleet(50)
    live = [make_node(ip=node.ip) for node in runner.nodes]
    run_sweep()
    assert Node.objects.get(pk=cut.pk).status == NodeStatus.ONLINE

    lab.cut()
    started = time.monotonic()
    stats = run_sweep()
    took = time.monotonic() - started

    node = Node.objects.get(pk=cut.pk)
    assert (node.status, node.status_reason) == (NodeStatus.OFFLINE, StatusReason.TIMEOUT)
    assert node.diagnosis == Diagnosis.HOST_DOWN
    assert f"within {TIMEOUT:g} s" in node.status_detail
    assert stats.confirmed == 1  # it had its second connection...
    assert stats.probe_duration < TIMEOUT + 0.5  # ...inside the one deadline (was 2 x timeout)
    assert took < TIMEOUT + 1.5
    others = Node.objects.filter(pk__in=[n.pk for n in live]).values_list("status", flat=True)
    assert set(others) == {NodeStatus.ONLINE}

    lab.restore()
    run_sweep()
    assert Node.objects.get(pk=cut.pk).status == NodeStatus.ONLINE
