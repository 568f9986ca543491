"""Benchmark: time from a node's death to the webhook's notification, at two settings.

What runs, all real: `mac start master` (process runtime: gunicorn, Celery worker and
beat, Debian's Prometheus and Alertmanager), a simulated fleet on loopback
(testkit.simfleet), and a webhook receiver (a real HTTP server) as the only channel,
made from MAC_ALERT_WEBHOOK_URL. Each run kills one node (every port refuses: the
agent's services are gone) at a random moment and records, from that moment:

1. Offline in MAC's inventory (the node's status_changed_at, from the API): the sweep,
   one MAC_PROBE_INTERVAL at most, plus the probe. The baseline: MAC's own detection.
2. The webhook's notification, and which source it carries (the master's own post,
   alerting.nodealerts, or the Prometheus backstop): the post after the sweep, the
   node route's group_wait (MAC_ALERT_NODE_GROUP_WAIT), delivery.
3. The Prometheus-rule path in the same run: MacNodeOffline active (pending) and
   firing in Prometheus. Alertmanager merges it into the alert already notified, so it
   sends nothing of its own; a notification by the rule alone could not come earlier
   than its firing.

The node then answers again (the time to the resolved notification is recorded), and
AGAIN_AFTER seconds after that notification it dies a second time, at a random moment
of the interval: the time to the second firing notification, and to the second
resolved one, are recorded too. The second death is a new incident (another
down_since), so a new group of the node route, sent after its group_wait
(MAC_ALERT_NODE_GROUP_WAIT), not the top route's 5 minutes (issue 31). Every setting
is MAC's default but MAC_PROBE_INTERVAL; two stacks run one after the other: interval
5 s, and every setting at its default (interval 30 s).

    .venv/bin/python -m bench.alert_latency [--runs 5] [--intervals 5,30]

Needs Debian's prometheus and prometheus-alertmanager, and Redis (MAC_REDIS_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.report import median, update_section
from testkit.alerting import WebhookReceiver
from testkit.alertstack import AlertStack
from testkit.ports import free_port
from testkit.simfleet import FleetThread, loopback_base, register_fleet
from testkit.waiting import wait_for

# The second death, this many seconds after the first one's resolved notification.
AGAIN_AFTER = 30.0
# The goals: death to notification, median, at interval 5 (other settings at
# their defaults), and at every default (interval 30).
GOALS = {5.0: 12.0, 30.0: 45.0}


@dataclass
class Run:
    offline: float  # seconds from death: the inventory says Offline
    notified: float  # the webhook has the firing notification
    source: str  # the notified alert's `source` annotation
    rule_active: float  # MacNodeOffline pending in Prometheus
    rule_firing: float  # firing in Prometheus
    resolved: float  # seconds from the node's return to the resolved notification
    notified_again: float  # seconds from the second death to its firing notification
    resolved_again: float  # from the second return to its resolved notification
    # Notifications about the node beyond the four changes (two firing, two resolved):
    # an alert that ended while the node was still dead, and fired again.
    extra: int


def _iso(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _about(webhook: WebhookReceiver, host: str, status: str, since: int) -> list:
    """The `status` notifications about `host` among those from index `since` on."""
    return [
        n for n in webhook.notifications[since:]
        if n.body["status"] == status
        and any(a["labels"].get("hostname") == host for a in n.body["alerts"])
    ]  # fmt: skip


def _seconds_to(webhook: WebhookReceiver, host: str, status: str, since: int, start: float):
    """(seconds from `start` to the first such notification, the notification)."""
    [first, *_] = wait_for(
        lambda: _about(webhook, host, status, since),
        timeout=600,
        interval=0.05,
        what=f"a {status} notification for {host}",
    )
    return first.received_at - start, first


def one_run(stack: AlertStack, fleet: FleetThread, webhook: WebhookReceiver, admin, node_id: int,
            index: int, probe_interval: float) -> Run:  # fmt: skip
    host = fleet.nodes[index].hostname
    time.sleep(random.uniform(0, probe_interval))  # a random moment of the interval
    seen = len(webhook.notifications)
    fleet.set_node_mode(index, "refuse")
    died = time.time()

    def prometheus_alert():
        alerts = stack.get_json(f"{stack.prom_url}/api/v1/alerts")["data"]["alerts"]
        return next(
            (a for a in alerts if a["labels"].get("alertname") == "MacNodeOffline"
             and a["labels"].get("hostname") == host), None,
        )  # fmt: skip

    active_at = firing_seen = notified = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and (notified is None or firing_seen is None):
        alert = prometheus_alert()
        if alert and active_at is None:
            active_at = _iso(alert["activeAt"])
        if alert and alert["state"] == "firing" and firing_seen is None:
            firing_seen = time.time()
        got = _about(webhook, host, "firing", seen)
        if got and notified is None:
            notified = got[0]
        time.sleep(0.05)
    if notified is None or firing_seen is None:
        raise TimeoutError(f"no notification or no firing rule for {host} within 600 s")
    [alert] = [a for a in notified.body["alerts"] if a["labels"].get("hostname") == host]
    node = admin.get_json(f"/api/v1/nodes/{node_id}/")
    offline = _iso(node["status_changed_at"])
    back = len(webhook.notifications)
    fleet.set_node_mode(index, "answer")
    resolved, ended = _seconds_to(webhook, host, "resolved", back, time.time())

    # The second death, AGAIN_AFTER seconds after the first resolution.
    time.sleep(max(0.0, ended.received_at + AGAIN_AFTER - time.time()))
    time.sleep(random.uniform(0, probe_interval))
    again = len(webhook.notifications)
    fleet.set_node_mode(index, "refuse")
    notified_again, _ = _seconds_to(webhook, host, "firing", again, time.time())
    back = len(webhook.notifications)
    fleet.set_node_mode(index, "answer")
    resolved_again, _ = _seconds_to(webhook, host, "resolved", back, time.time())
    time.sleep(2 * probe_interval)  # nothing of this node pending when the next run starts
    sent = len(_about(webhook, host, "firing", seen)) + len(_about(webhook, host, "resolved", seen))
    return Run(
        offline - died,
        notified.received_at - died,
        alert["annotations"].get("source", "?"),
        active_at - died,
        firing_seen - died,
        resolved,
        notified_again,
        resolved_again,
        sent - 4,
    )


def rule_alerts(stack: AlertStack) -> list[dict]:
    """The Prometheus rule MacNodeOffline's alerts (pending or firing)."""
    alerts = stack.get_json(f"{stack.prom_url}/api/v1/alerts")["data"]["alerts"]
    return [a for a in alerts if a["labels"].get("alertname") == "MacNodeOffline"]


def measure(probe_interval: float, runs: int) -> list[Run]:
    """`runs` deaths on one master whose probe interval is `probe_interval`."""
    webhook = WebhookReceiver()
    fleet = FleetThread(runs, base=loopback_base()).start()
    results = []
    with tempfile.TemporaryDirectory(prefix="mac-alert-bench-") as root:
        stack = AlertStack(
            Path(root),
            {
                "MAC_PROBE_INTERVAL": f"{probe_interval:g}",
                "MAC_ALERT_WEBHOOK_URL": webhook.url,
                # No fixed port at all: the bench runs beside other masters.
                "MAC_API_INTERNAL_PORT": str(free_port()),
            },
        )
        try:
            stack.start()
            asyncio.run(register_fleet(fleet.fleet, stack.url))
            hosts = {node.hostname for node in fleet.nodes}
            wait_for(
                lambda: (
                    set(stack.node_up()) >= hosts and all(stack.node_up()[h] == 1.0 for h in hosts)
                ),
                timeout=300,
                what="the fleet Online",
            )
            # Registered nodes are not Online until the first sweep: the rule may have
            # gone pending then. Runs start once Prometheus holds none of it.
            wait_for(
                lambda: not rule_alerts(stack), timeout=300, what="no MacNodeOffline from the start"
            )
            admin = stack.admin()
            ids = {n["hostname"]: n["id"] for n in admin.get_json("/api/v1/nodes/")["results"]}
            for index in range(runs):
                run = one_run(stack, fleet, webhook, admin, ids[fleet.nodes[index].hostname],
                              index, probe_interval)  # fmt: skip
                print(f"interval {probe_interval:g}, run {index + 1}: {run}", flush=True)
                results.append(run)
        finally:
            stack.stop()
            fleet.stop()
            webhook.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--intervals", default="5,30", help="probe intervals, comma-separated")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--note", default="", help="a sentence added to the write-up")
    args = parser.parse_args()
    measured = {
        float(interval): measure(float(interval), args.runs)
        for interval in args.intervals.split(",")
    }
    report(measured, args)


def report(measured: dict[float, list[Run]], args) -> None:
    def row(name: str, values: list[float]) -> str:
        return f"| {name} | {median(values):.1f} | {min(values):.1f} | {max(values):.1f} |"

    parts = [
        "One node of a simulated fleet stops answering (every port refuses) at a random "
        f"moment of the probe interval, {args.runs} runs per setting; `mac start master` "
        "runs everything (process runtime, Debian's Prometheus and Alertmanager), and a "
        "webhook receiver in the benchmark is the only channel. Every setting at MAC's "
        "default except MAC_PROBE_INTERVAL as named (MAC_ALERT_GROUP_INTERVAL stays 5 "
        "minutes). Both paths in the same runs: the master's own post "
        "(alerting.nodealerts) and the Prometheus rule MacNodeOffline, now the backstop, "
        "whose alert Alertmanager merges into the one already notified. The node then "
        f"answers again, and dies a second time {AGAIN_AFTER:g} s after the resolved "
        "notification, at a random moment of the interval: a new incident (another "
        "down_since), so a new group of the node route, sent after its group_wait "
        "(MAC_ALERT_NODE_GROUP_WAIT, 3 s).",
    ]
    if args.note:
        parts[0] += f" {args.note}"
    for interval, runs in measured.items():
        notified = [r.notified for r in runs]
        sources = sorted({r.source for r in runs})
        goal = GOALS.get(interval)
        verdict = ""
        if goal is not None:
            met = "met" if median(notified) <= goal else "missed"
            verdict = f" Goal: median at most {goal:g} s, {met}."
        parts += [
            "",
            f"**MAC_PROBE_INTERVAL={interval:g}**",
            "",
            "| seconds from the death | median | min | max |",
            "|---|---:|---:|---:|",
            row("Offline in MAC's inventory (baseline: MAC's own detection)",
                [r.offline for r in runs]),
            row("**notification at the webhook** (the master's post)", notified),
            row("Prometheus rule MacNodeOffline pending", [r.rule_active for r in runs]),
            row("Prometheus rule MacNodeOffline firing (the earliest the rule path could "
                "notify)", [r.rule_firing for r in runs]),
            row("resolved notification (seconds from the node's return)",
                [r.resolved for r in runs]),
            row(f"**second death: notification** ({AGAIN_AFTER:g} s after the first "
                "resolution)", [r.notified_again for r in runs]),
            row("second return: resolved notification", [r.resolved_again for r in runs]),
            "",
            f"- Death to notification: median **{median(notified):.1f} s**, max "
            f"**{max(notified):.1f} s**; the notifications' source: {', '.join(sources)}."
            f"{verdict}",
            f"- The second death: median **{median([r.notified_again for r in runs]):.1f} "
            f"s**, max **{max(r.notified_again for r in runs):.1f} s**. Notifications "
            f"beyond the four changes of each run: {sum(r.extra for r in runs)}.",
            f"- The rule path fired {median([r.rule_firing - r.notified for r in runs]):.1f} s "
            "(median) after the notification had gone out.",
        ]  # fmt: skip
    body = "\n".join(parts)
    print(body)
    if not args.no_write:
        update_section(
            "alert-latency", "Alerts: time from a node's death to the notification", body
        )


if __name__ == "__main__":
    main()
