"""From a GPU fault to a drained node, with every process real.

`mac start master` (process runtime: gunicorn, the Celery worker and beat, Prometheus,
Alertmanager) with MAC_PROBE_INTERVAL=5 and MAC_SLURM_DRAIN=on, pointed at a Slurm lab
(SLURM_CONF) whose NodeNames are the host names of four simulated 8x H200 nodes; a
webhook receives the notifications. Faults go in through the simulated fleet, Slurm is
read with Slurm's own tools: nothing of scontrol is a stand-in.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.settings import CATALOG
from scheduler.slurm import SlurmClient, SlurmNode
from testkit.alerting import WebhookReceiver
from testkit.alertstack import AlertStack
from testkit.simfleet import Fault, FleetThread, loopback_base, register_fleet
from testkit.slurmlab import SlurmLab, SlurmLabUnavailable, lab_folder
from testkit.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.slurm,
    pytest.mark.prometheus,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
        reason="Debian's prometheus and prometheus-alertmanager are needed",
    ),
]

INTERVAL = 5
TIMEOUT = CATALOG["MAC_PROBE_TIMEOUT"].default  # the stack leaves it at its default
# The bound: a fault is DRAIN in Slurm within interval + timeout + 5 s.
DRAIN_WITHIN = INTERVAL + TIMEOUT + 5
RESUME_SWEEPS = 2
# An XID counts on the simulated agents this long: past it, the verdict is healthy again.
WINDOW = 12


class Stack:
    def __init__(self, master: AlertStack, fleet: FleetThread, lab: SlurmLab, webhook) -> None:
        self.master, self.fleet, self.lab, self.webhook = master, fleet, lab, webhook
        self.slurm = SlurmClient(lab.conf)
        self.admin = master.admin()
        nodes = self.admin.get_json("/api/v1/nodes/")["results"]
        self.ids = {node["hostname"]: node["id"] for node in nodes}

    def host(self, index: int) -> str:
        return self.fleet.nodes[index].hostname

    def ip(self, index: int) -> str:
        return self.fleet.nodes[index].ip

    def node(self, index: int) -> dict:
        return self.admin.get_json(f"/api/v1/nodes/{self.ids[self.host(index)]}/")

    def slurm_node(self, index: int) -> SlurmNode:
        return self.slurm.node(self.host(index))

    def page(self, index: int) -> str:
        return self.admin.get(f"/nodes/{self.ids[self.host(index)]}/")

    def gpu_pages(self, index: int) -> list[dict]:
        """The MacGpuUnhealthy alerts of this node that reached the webhook, firing."""
        return [
            alert
            for note in self.webhook.matching(lambda body: body["status"] == "firing")
            for alert in note.body["alerts"]
            if alert["labels"].get("alertname") == "MacGpuUnhealthy"
            and alert["labels"].get("hostname") == self.host(index)
        ]

    def sweeps(self, count: int) -> None:
        """Until `count` more sweeps have finished (the master's own /health says when)."""
        seen = {self.health()["last_sweep"]["finished_at"]}

        def more() -> bool:
            seen.add(self.health()["last_sweep"]["finished_at"])
            return len(seen) > count

        wait_for(more, timeout=count * INTERVAL + 20, interval=0.5, what=f"{count} more sweeps")

    def health(self) -> dict:
        """The master's /health report, 200 or 503 (a 503 names what is down, and still
        says when the last sweep finished)."""
        try:
            with urllib.request.urlopen(f"{self.master.url}/health", timeout=5) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as answer:
            if answer.code != 503:
                raise
            return json.load(answer)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    webhook = WebhookReceiver()
    fleet = FleetThread(
        4, base=loopback_base(), profiles="nvidia=1", fault_rate=0, evidence_window=WINDOW
    ).start()
    try:
        with lab_folder() as root:
            lab = SlurmLab.start(root, [node.hostname for node in fleet.nodes], 8)
            master = AlertStack(
                Path(tmp_path_factory.mktemp("drain-master")),
                {
                    "MAC_PROBE_INTERVAL": str(INTERVAL),
                    "MAC_SLURM_DRAIN": "on",
                    "MAC_DRAIN_BUDGET": "100%",
                    "MAC_SLURM_RESUME_SWEEPS": str(RESUME_SWEEPS),
                    "SLURM_CONF": str(lab.conf),
                    "MAC_ALERT_WEBHOOK_URL": webhook.url,
                    "MAC_ALERT_GROUP_WAIT": "1s",
                    "MAC_ALERT_NODE_GROUP_WAIT": "1s",
                    "MAC_ALERT_GROUP_INTERVAL": "2s",
                    "MAC_ALERT_POLL_INTERVAL": "2",
                },
            )
            try:
                master.start()
                registered, errors = asyncio.run(register_fleet(fleet.fleet, master.url))
                assert registered == 4 and not errors
                wait_for(
                    lambda: set(master.node_up().values()) == {1.0} and len(master.node_up()) == 4,
                    timeout=60,
                    what="the four nodes Online",
                )
                yield Stack(master, fleet, lab, webhook)
            finally:
                master.stop()
                lab.stop()
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))
    finally:
        fleet.stop()
        webhook.close()


def test_xid_79_drains_in_time_and_its_page_and_notification_say_the_same_words(stack):
    stack.lab.scontrol("update", f"NodeName={stack.host(2)}", "State=DRAIN", "Reason=PSU swap")
    injected = time.monotonic()
    stack.fleet.inject(stack.ip(0), Fault.XID, 3, 79)
    stack.fleet.inject(stack.ip(2), Fault.XID, 3, 79)
    drained = wait_for(
        lambda: (node := stack.slurm_node(0)).drain and node,
        timeout=DRAIN_WITHIN + 30,
        interval=0.1,
        what=f"{stack.host(0)} DRAIN in Slurm",
    )
    took = time.monotonic() - injected
    assert took <= DRAIN_WITHIN, f"DRAIN after {took:.1f} s, more than {DRAIN_WITHIN} s"
    reason = drained.reason
    assert re.fullmatch(
        r"MAC: GPU 3 \(UUID GPU-[0-9a-f-]+, serial \w+\) XID 79: GPU has fallen off the bus "
        r"at \d\d:\d\d:\d\d; reboot",
        reason,
    ), reason

    # The node page says who drained it, in Slurm's very words.
    node = wait_for(
        lambda: (row := stack.node(0))["slurm_hold"] == "mac" and row,
        timeout=3 * INTERVAL,
        what="the node's row drained by MAC",
    )
    assert node["slurm_reason"] == reason and reason == f"MAC: {node['health_evidence']}"
    page = stack.page(0)
    assert f'<q class="mono" id="node-slurm-reason">{reason}</q>' in page
    assert ">drained by MAC</span>" in page
    # ...and so does the notification: its evidence is the reason's.
    [alert] = wait_for(lambda: stack.gpu_pages(0), timeout=30, what="MacGpuUnhealthy for node 0")
    evidence, action = reason.removeprefix("MAC: ").rsplit("; ", 1)
    assert alert["annotations"]["evidence"] == evidence
    assert alert["annotations"]["action"] == action == "reboot"
    assert next(e for e in node["events"] if e["kind"] == "slurm_drain")["message"] == (
        f"Drained {stack.host(0)} in Slurm (running jobs finish): {reason}"
    )

    # The administrator's drain is left as it is, and the history says why.
    held = wait_for(
        lambda: [e for e in stack.node(2)["events"] if e["kind"] == "slurm_not_drained"],
        timeout=3 * INTERVAL,
        what="the refusal in node 2's history",
    )
    assert held[0]["message"].startswith(
        f"Not drained: {stack.host(2)} is drained by root: PSU swap; MAC leaves"
    )
    assert stack.slurm_node(2).reason == "PSU swap"
    assert stack.node(2)["slurm_hold"] == "admin"


def test_healing_resumes_macs_drain_after_a_reboot_and_never_the_administrators(stack):
    stack.fleet.heal(stack.ip(0))
    stack.fleet.heal(stack.ip(2))
    # The XID ages out of node 0's verdict on the boot it happened on: healthy, but the
    # node never rebooted. MAC's drain (for reboot) stays, and its history says why, once.
    waiting = wait_for(
        lambda: [e for e in stack.node(0)["events"] if e["kind"] == "slurm_not_drained"],
        timeout=WINDOW + (RESUME_SWEEPS + 3) * INTERVAL + 20,
        interval=0.5,
        what=f"{stack.host(0)}'s resume waiting for a reboot",
    )
    assert waiting[0]["message"].startswith(
        f"Not resumed: {stack.host(0)} has not booted since its fault was last seen (MAC "
        "drained it for reboot)"
    )
    assert stack.node(0)["health_state"] == "healthy" and stack.slurm_node(0).drain
    stack.sweeps(1)
    assert stack.slurm_node(0).drain
    stack.fleet.reboot(stack.ip(0))
    resumed = wait_for(
        lambda: not (node := stack.slurm_node(0)).drain and node,
        timeout=(RESUME_SWEEPS + 3) * INTERVAL + 20,
        interval=0.5,
        what=f"{stack.host(0)} resumed after its reboot",
    )
    assert resumed.state == "idle" and resumed.reason == ""
    # The sweep records its steps once Slurm took them: the event may come a moment later.
    [event] = wait_for(
        lambda: [e for e in stack.node(0)["events"] if e["kind"] == "slurm_resume"],
        timeout=10,
        interval=0.25,
        what=f"{stack.host(0)}'s resume in its history",
    )
    node = stack.node(0)
    # At the first sweep with the streak long enough, or a later one where Slurm's own
    # answer came late: the message says how many it took.
    streak = re.search(r"GPU verdict healthy for (\d+) sweeps in a row", event["message"])
    assert streak and int(streak.group(1)) >= RESUME_SWEEPS, event["message"]
    assert "on a boot after the one its fault was last seen on" in event["message"]
    assert len([e for e in node["events"] if e["kind"] == "slurm_not_drained"]) == 1
    assert node["health_state"] == "healthy"
    # Node 2's verdict has been healthy as long: still the administrator's, word for word.
    assert stack.node(2)["health_state"] == "healthy"
    stack.sweeps(RESUME_SWEEPS + 1)
    admin = stack.slurm_node(2)
    assert admin.drain and admin.reason == "PSU swap"
    events = [e["kind"] for e in stack.node(2)["events"] if e["kind"].startswith("slurm_")]
    assert events == ["slurm_not_drained"]  # said once, over a dozen sweeps
    stack.lab.scontrol("update", f"NodeName={stack.host(2)}", "State=RESUME")


def test_xid_13_neither_drains_nor_pages(stack):
    stack.fleet.inject(stack.ip(1), Fault.XID, 0, 13)
    wait_for(
        lambda: stack.node(1)["health_action"] == "restart_app",
        timeout=3 * INTERVAL,
        what="node 1's verdict: restart_app",
    )
    stack.sweeps(2)
    assert not stack.slurm_node(1).drain
    assert stack.node(1)["health_state"] == "healthy"
    notified = [
        alert
        for note in stack.webhook.matching(lambda body: True)
        for alert in note.body["alerts"]
        if alert["labels"].get("hostname") == stack.host(1)
    ]
    assert notified == []  # no page, and no warning either


def test_with_slurmctld_stopped_health_says_so_at_once_and_the_drain_follows(stack):
    stack.lab.stop_controller()
    try:
        answers = []

        def says_unreachable() -> bool:
            started = time.monotonic()
            report = stack.health()
            answers.append(time.monotonic() - started)
            return not report["checks"]["slurm"]["ok"] and report

        report = wait_for(says_unreachable, timeout=4 * INTERVAL, interval=0.5, what="/health")
        assert max(answers) < 1.0, answers
        assert "slurm" in report["degraded"] and report["status"] == "degraded"
        assert "slurmctld unreachable for" in report["checks"]["slurm"]["detail"]
        # A GPU off the bus until healed: it outlasts the outage, as a real one would.
        stack.fleet.inject(stack.ip(3), Fault.GPU_LOST, 3)
        wait_for(
            lambda: stack.node(3)["health_state"] == "unhealthy",
            timeout=3 * INTERVAL,
            what="node 3 unhealthy",
        )
    finally:
        stack.lab.start_controller()
    back = wait_for(
        lambda: (node := stack.slurm_node(3)).drain and node,
        timeout=60,
        interval=0.5,
        what=f"{stack.host(3)} drained once slurmctld is back",
    )
    assert back.reason == f"MAC: {stack.node(3)['health_evidence']}"
    assert stack.health()["checks"]["slurm"]["ok"]
