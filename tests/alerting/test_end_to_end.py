"""Alerts reach people, end to end, with every process real.

`mac start master` (process runtime) runs gunicorn, the Celery worker and beat, Debian's
Prometheus and Alertmanager; the channels come from MAC_ALERT_WEBHOOK_URL and
MAC_ALERT_EMAIL_TO, pointing at a webhook receiver and an aiosmtpd sink in this test.
Simulated nodes (testkit.simfleet) stop answering and come back. The intervals are
short through MAC's own settings: MAC_PROBE_INTERVAL=1, MAC_SCRAPE_INTERVAL=1s,
MAC_ALERT_FOR=MacNodeOffline=10s, MAC_ALERT_GROUP_WAIT=1s, MAC_ALERT_NODE_GROUP_WAIT=1s,
MAC_ALERT_GROUP_INTERVAL=2s, MAC_ALERT_POLL_INTERVAL=1.

The master posts MacNodeOffline itself (alerting.nodealerts); the Prometheus rule of
the same name is the backstop, held back here by a `for:` of 10 s so that the tests can
tell which of the two a notification came from.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from alerting import nodealerts
from contract.diagnosis import DESCRIPTIONS
from testkit.alerting import SmtpSink, WebhookReceiver, body_text
from testkit.alertstack import ADMIN_PASSWORD, AlertStack
from testkit.browser import log_in
from testkit.simfleet import FleetThread, loopback_base, register_fleet
from testkit.waiting import wait_for

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
        reason="Debian's prometheus and prometheus-alertmanager are needed",
    ),
]

# How long a dead node may take to reach the webhook here: a sweep (1 s), the post,
# group_wait 1 s, plus a loaded CI machine.
NOTIFY_WITHIN = 60
# The backstop rule's `for:`: it cannot fire before this many seconds after the death.
RULE_FOR = 10


class Stack:
    def __init__(self, master: AlertStack, fleet: FleetThread, webhook, smtp) -> None:
        self.master, self.fleet, self.webhook, self.smtp = master, fleet, webhook, smtp
        self.admin = master.admin()
        self.ids = {
            n["hostname"]: n["id"] for n in self.admin.get_json("/api/v1/nodes/")["results"]
        }

    def host(self, index: int) -> str:
        return self.fleet.nodes[index].hostname

    def offline_notifications(self, host: str, status: str) -> list:
        def about(body: dict) -> bool:
            return body["status"] == status and any(
                a["labels"].get("alertname") == "MacNodeOffline"
                and a["labels"].get("hostname") == host
                and a["status"] == status
                for a in body["alerts"]
            )

        return self.webhook.matching(about)

    def wait_notification(self, host: str, status: str, after: int = 0):
        return wait_for(
            lambda: self.offline_notifications(host, status)[after:],
            timeout=NOTIFY_WITHIN,
            what=f"a {status} MacNodeOffline notification for {host}",
        )[0]

    def set_maintenance(self, host: str, on: bool) -> None:
        answer = self.admin.send_json(
            "PUT", f"/api/v1/nodes/{self.ids[host]}/maintenance", {"maintenance": on}
        )
        assert answer["maintenance"] is on


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    webhook, smtp = WebhookReceiver(), SmtpSink()
    fleet = FleetThread(2, base=loopback_base()).start()
    master = AlertStack(
        Path(tmp_path_factory.mktemp("alert-master")),
        {
            "MAC_PROBE_INTERVAL": "1",
            "MAC_PROBE_TIMEOUT": "1",
            "MAC_SCRAPE_INTERVAL": "1s",
            "MAC_ALERT_FOR": f"MacNodeOffline={RULE_FOR}s",
            "MAC_ALERT_GROUP_WAIT": "1s",
            "MAC_ALERT_NODE_GROUP_WAIT": "1s",
            "MAC_ALERT_GROUP_INTERVAL": "2s",
            "MAC_ALERT_POLL_INTERVAL": "1",
            "MAC_ALERT_WEBHOOK_URL": webhook.url,
            "MAC_ALERT_EMAIL_TO": "ops@example.test",
            "MAC_SMTP_HOST": "127.0.0.1",
            "MAC_SMTP_PORT": str(smtp.port),
            "MAC_SMTP_FROM": "mac@example.test",
            "MAC_SMTP_TLS": "0",
        },
    )
    try:
        started = master.start()
        assert "Alerts:      http://127.0.0.1:" in started.stdout
        registered, errors = asyncio.run(register_fleet(fleet.fleet, master.url))
        assert registered == 2 and not errors
        hosts = {node.hostname for node in fleet.nodes}
        wait_for(
            lambda: {h for h, up in master.node_up().items() if up == 1.0} >= hosts,
            what="both nodes Online",
        )
        yield Stack(master, fleet, webhook, smtp)
    finally:
        master.stop()
        fleet.stop()
        webhook.close()
        smtp.close()


def test_mac_status_master_lists_alertmanager(stack):
    shown = stack.master.mac("status", "master")
    rows = {line.split()[0]: line.split() for line in shown.stdout.splitlines()[2:] if line.split()}
    assert rows["alertmanager"][1:4] == ["running", "ok", str(stack.master.am_port)]
    config = stack.master.get_json(f"{stack.master.prom_url}/api/v1/alertmanagers")
    active = [a["url"] for a in config["data"]["activeAlertmanagers"]]
    assert active == [f"http://127.0.0.1:{stack.master.am_port}/api/v2/alerts"]


def test_a_dead_node_notifies_once_by_webhook_and_email_then_resolves(stack):
    host = stack.host(0)
    stack.fleet.set_node_mode(0, "refuse")  # the agent's services are gone
    died = time.time()

    firing = stack.wait_notification(host, "firing")
    [alert] = [a for a in firing.body["alerts"] if a["labels"]["hostname"] == host]
    # From the master's own post, before the backstop rule could have fired.
    assert alert["annotations"]["source"] == "mac-master"
    assert firing.received_at - died < RULE_FOR
    assert set(alert["labels"]) == set(nodealerts.LABEL_NAMES)
    words, fix = DESCRIPTIONS["service_down"]
    assert alert["annotations"]["description"] == words
    assert alert["annotations"]["reason"].startswith("connection refused")
    assert alert["annotations"]["runbook_url"].endswith("#a-node-is-offline-macnodeoffline")
    # The webhook gets no template: the fix comes in an annotation.
    assert alert["annotations"]["fix"] == fix

    mail = stack.smtp.wait_for(lambda m: host in m["Subject"], timeout=NOTIFY_WITHIN)
    assert mail is not None and mail["Subject"].startswith("[MAC FIRING:1] MacNodeOffline")
    text = " ".join(body_text(mail).split())
    assert f"Host: {host}" in text and "Reason: connection refused" in text
    assert " ".join(words.split()) in text and "mac restart agent" in text
    assert f"Node page: {stack.master.url}/nodes/{stack.ids[host]}/" in text

    time.sleep(RULE_FOR + 5)  # the backstop fires too: the same alert, still one notification
    assert len(stack.offline_notifications(host, "firing")) == 1

    stack.fleet.set_node_mode(0, "answer")
    resolved = stack.wait_notification(host, "resolved")
    assert resolved.body["status"] == "resolved"
    assert stack.smtp.wait_for(lambda m: m["Subject"].startswith("[MAC RESOLVED]"), NOTIFY_WITHIN)


def test_a_master_that_stops_posting_leaves_the_alert_to_the_backstop(stack):
    """Beat stopped (no sweep, no post) while the API still serves /metrics: the master's
    alert would end at its endsAt (2 minutes on), but the backstop rule fires and holds
    it."""
    host = stack.host(0)
    stack.fleet.set_node_mode(0, "refuse")
    firing = stack.wait_notification(host, "firing", after=1)
    beat = stack.master.service_pid("beat")
    os.kill(beat, signal.SIGSTOP)
    try:
        stopped = time.time()

        def held() -> list[dict]:
            alerts = stack.master.get_json(f"{stack.master.am_url}/api/v2/alerts")
            return [a for a in alerts if a["labels"].get("hostname") == host]

        # The backstop fired (its `for:` is 10 s here): the alert is the backstop's now,
        # and never ended.
        while time.time() - stopped < 30:
            assert held(), "the alert ended while the node was still Offline"
            time.sleep(1)
        [alert] = held()
        assert alert["annotations"]["source"] == "prometheus-backstop"
        assert len(stack.offline_notifications(host, "firing")) == 2  # this incident's one
        assert len(stack.offline_notifications(host, "resolved")) == 1  # the first test's
        assert firing.received_at < stopped
    finally:
        os.kill(beat, signal.SIGCONT)
    stack.fleet.set_node_mode(0, "answer")
    stack.wait_notification(host, "resolved", after=1)


def _pause(pid: int, sig: signal.Signals) -> None:
    """Stop or continue a service with its children (gunicorn's workers)."""
    process = psutil.Process(pid)
    for each in [process, *process.children(recursive=True)]:
        each.send_signal(sig)


def test_a_master_whose_metrics_cannot_be_read_tells_nobody_the_node_is_back(stack):
    """The API and beat stopped while a node is Offline and the backstop fired: Prometheus
    cannot scrape the master, so mac_node_up goes stale. The backstop keeps the alert it
    was firing (no false "resolved", whose re-sends would also end the master's next
    post) until the master answers again."""
    host = stack.host(0)
    firings = len(stack.offline_notifications(host, "firing"))
    resolved = len(stack.offline_notifications(host, "resolved"))
    stack.fleet.set_node_mode(0, "refuse")
    stack.wait_notification(host, "firing", after=firings)

    def rule_firing() -> list[dict]:
        alerts = stack.master.get_json(f"{stack.master.prom_url}/api/v1/alerts")["data"]
        return [
            a for a in alerts["alerts"]
            if a["labels"]["alertname"] == "MacNodeOffline"
            and a["labels"]["hostname"] == host and a["state"] == "firing"
        ]  # fmt: skip

    wait_for(rule_firing, timeout=NOTIFY_WITHIN, what="the backstop firing")
    paused = [stack.master.service_pid(name) for name in ("beat", "api-server")]
    for pid in paused:
        _pause(pid, signal.SIGSTOP)
    try:

        def master_down() -> bool:
            query = f"{stack.master.prom_url}/api/v1/query?query=up%7Bjob%3D%22mac-master%22%7D"
            result = stack.master.get_json(query)["data"]["result"]
            return bool(result) and all(r["value"][1] == "0" for r in result)

        wait_for(master_down, timeout=30, what="Prometheus failing to scrape the master")
        failed = time.time()
        while time.time() - failed < 15:
            assert rule_firing(), "the backstop ended its alert when the scrape failed"
            alerts = stack.master.get_json(f"{stack.master.am_url}/api/v2/alerts")
            assert [a for a in alerts if a["labels"].get("hostname") == host]
            time.sleep(1)
        assert len(stack.offline_notifications(host, "resolved")) == resolved
    finally:
        for pid in paused:
            _pause(pid, signal.SIGCONT)
        stack.fleet.set_node_mode(0, "answer")
    stack.wait_notification(host, "resolved", after=resolved)


def test_a_node_in_maintenance_is_silenced_and_notifies_nobody(stack):
    host, node_id = stack.host(1), stack.ids[stack.host(1)]
    stack.set_maintenance(host, True)
    [silence] = wait_for(
        lambda: [
            s
            for s in stack.master.mac_silences()
            if {"name": "node", "value": str(node_id), "isRegex": False, "isEqual": True}
            in s["matchers"]
        ],
        timeout=30,
        what="MAC's silence for the node",
    )
    assert host in silence["comment"]

    stack.fleet.set_node_mode(1, "refuse")
    wait_for(lambda: stack.master.node_up().get(host) == 0.0, what="the node Offline")
    time.sleep(RULE_FOR + 5)  # well past the post, for + scrape + evaluation + group_wait
    assert stack.offline_notifications(host, "firing") == []

    stack.fleet.set_node_mode(1, "answer")
    stack.set_maintenance(host, False)
    wait_for(lambda: not stack.master.mac_silences(), timeout=30, what="the silence expired")


def test_editing_a_channel_in_the_admin_reloads_alertmanager_with_the_new_route(stack):
    channels = stack.admin.get_json("/api/v1/alert-channels/?kind=webhook")["results"]
    [hook] = channels
    change = f"/admin/alerting/notificationchannel/{hook['id']}/change/"
    page = stack.admin.get(change)
    assert "hooks" not in page or stack.webhook.url not in page  # the URL is write-only
    stack.admin.post_form(
        change,
        {
            "name": hook["name"],
            "kind": "webhook",
            "enabled": "on",
            "send_resolved": "on",
            "severities": ["critical", "warning"],
            "matchers": 'cluster_name="mac"',
            "url": "",
            "email_to": "",
            "smtp_host": "",
            "smtp_port": "587",
            "smtp_user": "",
            "smtp_password": "",
            "smtp_from": "",
            "smtp_require_tls": "on",
        },
        page,
    )

    def loaded() -> str:
        return stack.master.get_json(f"{stack.master.am_url}/api/v2/status")["config"]["original"]

    wait_for(
        lambda: 'severity=~"critical|warning"' in loaded() and 'cluster_name="mac"' in loaded(),
        timeout=10,
        what="the new route in Alertmanager",
    )


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_the_fleet_page_shows_the_firing_alert_and_clears_it(stack):
    from playwright.sync_api import expect, sync_playwright

    host = stack.host(0)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.set_default_timeout(NOTIFY_WITHIN * 1000)
        log_in(page, stack.master.url, "admin", ADMIN_PASSWORD)
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        expect(page.locator("#alerts-panel")).to_have_attribute("data-state", "quiet")

        stack.fleet.set_node_mode(0, "refuse")
        row = page.locator("#alerts-list li", has_text="MacNodeOffline")
        # A sweep, a scrape, the rule's for: and Alertmanager: not expect's default 5 s.
        within = NOTIFY_WITHIN * 1000
        expect(row).to_contain_text(host, timeout=within)
        expect(page.locator("#alerts-count")).to_have_text("1")
        page.screenshot(path=str(stack.master.root / "fleet-alert.png"))

        stack.fleet.set_node_mode(0, "answer")
        expect(row).to_have_count(0, timeout=within)
        expect(page.locator("#alerts-panel")).to_have_attribute("data-state", "quiet")
        browser.close()


def test_a_killed_alertmanager_comes_back_with_its_silences(stack):
    host = stack.host(1)
    stack.set_maintenance(host, True)
    wait_for(stack.master.mac_silences, timeout=30, what="the silence")
    started = stack.master.get_json(f"{stack.master.am_url}/api/v2/status")["uptime"]
    stack.master.kill_service("alertmanager")  # SIGKILL: silences not snapshotted

    status, said = wait_for(
        lambda: (a := stack.admin.get_json_answer("/alerts.json"))[1]["available"] is False and a,
        timeout=20,
        interval=0.05,
        what="the dashboard saying alerts are unavailable",
    )
    assert status == 503  # with the reason, which the page shows
    assert said["error"].startswith("cannot reach")
    health = stack.master.get_json(f"{stack.master.url}/health")
    assert health["status"] in ("degraded", "ok")  # ok once the supervisor has restarted it

    wait_for(
        lambda: (
            stack.admin.get_json_answer("/alerts.json")[1]["available"]
            and stack.master.get_json(f"{stack.master.am_url}/api/v2/status")["uptime"] != started
        ),
        timeout=60,
        what="Alertmanager restarted by the supervisor",
    )
    [silence] = wait_for(stack.master.mac_silences, timeout=30, what="the silence put back")
    assert host in silence["comment"]
    stack.set_maintenance(host, False)
