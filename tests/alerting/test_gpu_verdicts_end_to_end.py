"""A sick GPU, end to end, every process real: the verdict within one sweep, everywhere.

`mac start master` (process runtime: gunicorn, Celery worker and beat, Debian's
Prometheus and Alertmanager) at MAC_PROBE_INTERVAL=5, a webhook channel, and one
simulated 8x H200 node (testkit.simfleet) whose faults come from the command a person
types: `python -m testkit.simfleet inject <host> xid=79 gpu=3`, in another process,
through the fleet's control server. The node page (server-rendered), the API and the
notification must say the same words.
"""

from __future__ import annotations

import asyncio
import html
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.verdicts import Evidence
from testkit.alerting import WebhookReceiver
from testkit.alertstack import AlertStack
from testkit.simfleet import FleetThread, loopback_base, register_fleet
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
INTERVAL, TIMEOUT = 5, 1
# One sweep: the fault lands just after a sweep's probe, the next sweep (an interval
# later, its probe within the timeout) reads it; 5 s for its save and the API's answer.
ONE_SWEEP = INTERVAL + TIMEOUT + 5
WINDOW = 6  # seconds an event counts on the simulated agent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
        reason="Debian's prometheus and prometheus-alertmanager are needed",
    ),
]


class Stack:
    def __init__(self, master: AlertStack, fleet: FleetThread, webhook, state: Path) -> None:
        self.master, self.fleet, self.webhook, self.state = master, fleet, webhook, state
        self.admin = master.admin()
        self.host = fleet.nodes[0].hostname
        self.id = self.admin.get_json(f"/api/v1/nodes/?search={self.host}")["results"][0]["id"]

    def simfleet(self, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "testkit.simfleet", *args, "--state-dir", str(self.state)],
            capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def node(self) -> dict:
        return self.admin.get_json(f"/api/v1/nodes/{self.id}/")

    def wait_verdict(self, state: str, action: str, within: float) -> tuple[dict, float]:
        started = time.monotonic()
        node = wait_for(
            lambda: (
                (n := self.node())["health_state"] == state and n["health_action"] == action and n
            ),
            timeout=within + 30,
            interval=0.25,
            what=f"{self.host}'s verdict {state}, {action}",
        )
        return node, time.monotonic() - started

    def gpu_alerts(self, status: str) -> list[dict]:
        return [
            alert
            for note in self.webhook.matching(lambda body: True)
            for alert in note.body["alerts"]
            if alert["labels"].get("alertname", "").startswith("MacGpu")
            and alert["labels"].get("hostname") == self.host
            and alert["status"] == status
        ]


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    webhook = WebhookReceiver()
    state = Path(tmp_path_factory.mktemp("fleet-state"))
    fleet = FleetThread(
        1, base=loopback_base(), profiles="nvidia=1", fault_rate=0, evidence_window=WINDOW,
        control_dir=state / "simfleet",
    ).start()  # fmt: skip
    master = AlertStack(
        Path(tmp_path_factory.mktemp("gpu-master")),
        {
            "MAC_PROBE_INTERVAL": str(INTERVAL),
            "MAC_PROBE_TIMEOUT": str(TIMEOUT),
            "MAC_SCRAPE_INTERVAL": "1s",
            "MAC_ALERT_GROUP_WAIT": "1s",
            "MAC_ALERT_NODE_GROUP_WAIT": "1s",
            "MAC_ALERT_GROUP_INTERVAL": "2s",
            "MAC_ALERT_POLL_INTERVAL": "1",
            "MAC_ALERT_WEBHOOK_URL": webhook.url,
        },
    )
    try:
        master.start()
        registered, errors = asyncio.run(register_fleet(fleet.fleet, master.url))
        assert registered == 1 and not errors
        made = Stack(master, fleet, webhook, state)
        wait_for(lambda: made.node()["health_streak"] >= 1, timeout=60, what="the first verdict")
        yield made
    finally:
        master.stop()
        fleet.stop()
        webhook.close()


def test_xid_79_on_gpu_3_is_unhealthy_within_one_sweep_with_the_same_words_everywhere(stack):
    injected = stack.simfleet("inject", stack.host, "xid=79", "gpu=3")
    assert f"Injected XID 79 on GPU 3 of {stack.host}" in injected.stdout

    node, took = stack.wait_verdict("unhealthy", "reboot", ONE_SWEEP)
    assert took <= ONE_SWEEP, f"the verdict took {took:.1f} s, more than one sweep"
    gpus = stack.admin.get_json(f"/api/v1/nodes/{stack.id}/gpus/")
    gpu3 = next(gpu for gpu in gpus if gpu["index"] == 3)
    (item,) = gpu3["evidence"]
    words = Evidence.from_dict(item).words()
    assert words == item["words"]
    assert words.startswith(f"GPU 3 (UUID {gpu3['uuid']}, serial {gpu3['serial']}) XID 79")
    assert node["health_evidence"] == f"{words}; reboot"

    page = stack.admin.get(f"/nodes/{stack.id}/")
    assert html.escape(node["health_evidence"]) in page  # the node page, server-rendered

    alert = wait_for(
        lambda: stack.gpu_alerts("firing"), timeout=30, what="a MacGpuUnhealthy notification"
    )[0]
    assert alert["labels"]["alertname"] == "MacGpuUnhealthy"
    assert (alert["labels"]["severity"], alert["labels"]["gpu"]) == ("critical", "3")
    assert alert["annotations"]["evidence"] == words
    assert alert["annotations"]["gpu"] == f"GPU 3 (UUID {gpu3['uuid']}, serial {gpu3['serial']})"
    assert alert["annotations"]["action"] == "reboot"


def test_xid_13_asks_the_job_to_restart_and_pages_nobody(stack):
    stack.simfleet("inject", stack.host, "xid=13", "gpu=0")
    gpu0 = wait_for(
        lambda: (
            (g := stack.admin.get_json(f"/api/v1/nodes/{stack.id}/gpus/")[0])["action"]
            == "restart_app"
            and g
        ),
        timeout=ONE_SWEEP + 30,
        what="GPU 0's restart_app",
    )
    assert gpu0["state"] == "healthy"
    time.sleep(8)  # Prometheus scrapes every second: GpuXidError would have fired by now
    firing = stack.master.get_json(f"{stack.master.am_url}/api/v2/alerts")
    about_gpu0 = [a for a in firing if a["labels"].get("gpu") == "0"]
    assert about_gpu0 == []


def test_healed_the_verdict_clears_after_the_window_and_the_alert_resolves(stack):
    healed = stack.simfleet("heal", stack.host)
    assert f"Healed {stack.host}" in healed.stdout
    node, _ = stack.wait_verdict("healthy", "none", WINDOW + ONE_SWEEP)
    assert node["health_evidence"] == ""
    wait_for(lambda: stack.gpu_alerts("resolved"), timeout=30, what="the GPU alert resolved")


def test_the_same_xid_after_a_reboot_escalates_to_inspect_hardware(stack):
    stack.simfleet("reboot", stack.host)
    boot = wait_for(
        lambda: (n := stack.node())["boot_id"].endswith("000000000001") and n["boot_id"],
        timeout=ONE_SWEEP + 30,
        what="the new boot",
    )
    registered, errors = asyncio.run(register_fleet(stack.fleet.fleet, stack.master.url))
    assert registered == 1 and not errors  # the agent registers again after the reboot
    stack.simfleet("inject", stack.host, "xid=79", "gpu=3")
    node, _ = stack.wait_verdict("unhealthy", "inspect_hardware", ONE_SWEEP)
    assert "back after 1 reboot(s)" in node["health_evidence"] and boot
