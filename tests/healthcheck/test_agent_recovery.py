"""A killed agent goes Offline within one interval plus the timeout, and comes back."""

from __future__ import annotations

import signal
import time

import pytest

from inventory.choices import Diagnosis, NodeStatus, StatusReason
from inventory.models import Node
from testkit.ports import check_contract_ports
from testkit.simfleet import loopback_base
from testkit.waiting import wait_for
from tests.healthcheck.conftest import PYTHON, wait_ready

pytestmark = pytest.mark.slow

INTERVAL, TIMEOUT = 1.0, 0.5
# Sweeps are scheduled work on a shared 2-core machine: allow this much lateness.
SLACK = 2.0


def start_agent(processes, ip: str):
    check_contract_ports([ip])  # its own process would fail to bind: skip here instead
    agent = processes.start("agent", [PYTHON, "-m", "testkit.simfleet", "--ip", ip], env=None)
    wait_ready(agent)
    return agent


def status_of(node: Node) -> str:
    return Node.objects.values_list("status", flat=True).get(pk=node.pk)


def test_a_killed_agent_goes_offline_and_returns_after_restart(master_procs, make_node):
    ip = loopback_base().rsplit(".", 1)[0] + ".1"
    procs = master_procs(beats=1)
    agent = start_agent(procs, ip)
    node = make_node(ip=ip)
    try:
        wait_for(lambda: status_of(node) == NodeStatus.ONLINE, timeout=40, interval=0.1)
    except AssertionError:
        pytest.fail("the node never came online:\n" + procs.logs())

    procs.stop(agent, signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: status_of(node) == NodeStatus.OFFLINE, timeout=10, interval=0.05)
    went_offline = time.monotonic() - killed

    node.refresh_from_db()
    assert node.status_reason == StatusReason.REFUSED
    assert node.diagnosis == Diagnosis.SERVICE_DOWN
    assert went_offline <= INTERVAL + TIMEOUT + SLACK, went_offline

    start_agent(procs, ip)
    restarted = time.monotonic()
    wait_for(lambda: status_of(node) == NodeStatus.ONLINE, timeout=10, interval=0.05)
    came_back = time.monotonic() - restarted
    assert came_back <= INTERVAL + SLACK, came_back
    kinds = list(node.events.order_by("created_at").values_list("kind", flat=True))
    assert kinds == ["online", "offline", "online"]
