"""Benchmark: time from a node's death to the webhook's notification, and what makes it up.

What runs, all real: `mac start master` (process runtime: gunicorn, Celery worker and
beat, Debian's Prometheus and Alertmanager), a simulated fleet on loopback
(testkit.simfleet), and a webhook receiver (a real HTTP server) as the only channel,
made from MAC_ALERT_WEBHOOK_URL. Each run kills one node (every port refuses: the
agent's services are gone) at a random moment and records, from that moment:

1. Offline in MAC's inventory (the node's status_changed_at, from the API): the sweep,
   one MAC_PROBE_INTERVAL at most, plus the probe;
2. MacNodeOffline active (pending) in Prometheus (its activeAt): the master's /metrics
   scraped and the rule evaluated, one MAC_SCRAPE_INTERVAL at most each;
3. firing: the rule's `for:` (MAC_ALERT_FOR), rounded up to an evaluation;
4. the webhook's notification: Alertmanager's group_wait (MAC_ALERT_GROUP_WAIT) and
   the delivery.

The node then answers again, the resolved notification is awaited, and the group is
left to empty before the next run. The baseline, measured in the same run, is step 1
alone: how long MAC itself takes to know. The figure at MAC's defaults (interval 30 s,
scrape and evaluation 15 s, `for: 1m`, group_wait 30 s) is computed from the measured
steps (each step's delay scaled to its default setting, the fixed part kept), and
says so.

    .venv/bin/python -m bench.alert_latency [--runs 5] [--probe-interval 5]
        [--scrape-interval 5] [--for 15] [--group-wait 5]

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
from testkit.simfleet import FleetThread, loopback_base, register_fleet
from testkit.waiting import wait_for

# MAC's defaults (macweb/settings.py, alerting's rules) that the computed line scales to.
DEFAULTS = {"probe": 30.0, "scrape": 15.0, "for": 60.0, "group_wait": 30.0}


@dataclass
class Run:
    offline: float  # seconds from death: the inventory says Offline
    active: float  # MacNodeOffline pending in Prometheus
    firing: float  # firing in Prometheus
    notified: float  # the webhook has the notification


def _iso(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def one_run(stack: AlertStack, fleet: FleetThread, webhook: WebhookReceiver, admin, node_id: int,
            index: int, probe_interval: float, group_interval: float) -> Run:  # fmt: skip
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

    active_at = firing_seen = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        alert = prometheus_alert()
        if alert and active_at is None:
            active_at = _iso(alert["activeAt"])
        if alert and alert["state"] == "firing" and firing_seen is None:
            firing_seen = time.time()
        got = [
            n for n in webhook.notifications[seen:]
            if n.body["status"] == "firing"
            and any(a["labels"].get("hostname") == host for a in n.body["alerts"])
        ]  # fmt: skip
        if got:
            notified = got[0].received_at
            break
        time.sleep(0.05)
    else:
        raise TimeoutError(f"no notification for {host} within 600 s")
    node = admin.get_json(f"/api/v1/nodes/{node_id}/")
    offline = _iso(node["status_changed_at"])
    fleet.set_node_mode(index, "answer")
    wait_for(
        lambda: any(
            n.body["status"] == "resolved"
            and any(a["labels"].get("hostname") == host for a in n.body["alerts"])
            for n in webhook.notifications[seen:]
        ),
        timeout=600,
        what="the resolved notification",
    )
    time.sleep(group_interval * 2 + 1)  # the group empties: the next run starts afresh
    return Run(offline - died, active_at - died, (firing_seen or notified) - died, notified - died)


def computed_default(runs: list[Run], args) -> tuple[float, float]:
    """(median, max) at MAC's defaults, from the measured steps of each run.

    Each step's delay is taken to scale with the setting that bounds it (a uniform
    phase within the interval), and the configured waits (`for:`, group_wait) are
    replaced by their defaults while what was measured beyond them is kept.
    """
    totals = []
    for run in runs:
        detection = run.offline * DEFAULTS["probe"] / args.probe_interval
        scrape_eval = (run.active - run.offline) * DEFAULTS["scrape"] / args.scrape_interval
        pending_extra = max(0.0, (run.firing - run.active) - args.for_seconds)
        pending = DEFAULTS["for"] + pending_extra * DEFAULTS["scrape"] / args.scrape_interval
        delivery_extra = max(0.0, (run.notified - run.firing) - args.group_wait)
        totals.append(detection + scrape_eval + pending + DEFAULTS["group_wait"] + delivery_extra)
    return median(totals), max(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--probe-interval", type=float, default=5.0)
    parser.add_argument("--scrape-interval", type=float, default=5.0)
    parser.add_argument("--for", dest="for_seconds", type=float, default=15.0)
    parser.add_argument("--group-wait", type=float, default=5.0)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    group_interval = 5.0
    webhook = WebhookReceiver()
    fleet = FleetThread(args.runs, base=loopback_base()).start()
    with tempfile.TemporaryDirectory(prefix="mac-alert-bench-") as root:
        stack = AlertStack(
            Path(root),
            {
                "MAC_PROBE_INTERVAL": f"{args.probe_interval:g}",
                "MAC_SCRAPE_INTERVAL": f"{args.scrape_interval:g}s",
                "MAC_ALERT_FOR": f"MacNodeOffline={args.for_seconds:g}s",
                "MAC_ALERT_GROUP_WAIT": f"{args.group_wait:g}s",
                "MAC_ALERT_GROUP_INTERVAL": f"{group_interval:g}s",
                "MAC_ALERT_POLL_INTERVAL": "5",
                "MAC_ALERT_WEBHOOK_URL": webhook.url,
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
                timeout=120,
                what="the fleet Online",
            )
            admin = stack.admin()
            ids = {n["hostname"]: n["id"] for n in admin.get_json("/api/v1/nodes/")["results"]}
            runs = []
            for index in range(args.runs):
                run = one_run(stack, fleet, webhook, admin, ids[fleet.nodes[index].hostname],
                              index, args.probe_interval, group_interval)  # fmt: skip
                print(f"run {index + 1}: {run}", flush=True)
                runs.append(run)
        finally:
            stack.stop()
            fleet.stop()
            webhook.close()
    report(runs, args)


def report(runs: list[Run], args) -> None:
    def row(name: str, values: list[float]) -> str:
        return f"| {name} | {median(values):.1f} | {min(values):.1f} | {max(values):.1f} |"

    steps = [
        ("Offline in MAC's inventory (baseline: MAC's own detection)", [r.offline for r in runs]),
        ("MacNodeOffline pending in Prometheus", [r.active for r in runs]),
        ("MacNodeOffline firing", [r.firing for r in runs]),
        ("**notification at the webhook**", [r.notified for r in runs]),
    ]
    notified = [r.notified for r in runs]
    extra = median([r.notified - r.offline for r in runs])
    at_default, at_default_max = computed_default(runs, args)
    body = "\n".join(
        [
            f"One node of a simulated fleet stops answering (every port refuses) at a random "
            f"moment, {len(runs)} runs; `mac start master` runs everything (process runtime, "
            f"Debian's Prometheus and Alertmanager), and a webhook receiver in the benchmark "
            f"is the only channel. Settings: MAC_PROBE_INTERVAL={args.probe_interval:g}, "
            f"MAC_SCRAPE_INTERVAL={args.scrape_interval:g}s (scrape and rule evaluation), "
            f"MAC_ALERT_FOR=MacNodeOffline={args.for_seconds:g}s, "
            f"MAC_ALERT_GROUP_WAIT={args.group_wait:g}s.",
            "",
            "| seconds from the death | median | min | max |",
            "|---|---:|---:|---:|",
            *(row(name, values) for name, values in steps),
            "",
            f"- Death to notification: median **{median(notified):.1f} s**, max "
            f"**{max(notified):.1f} s**; of it, {extra:.1f} s (median) come after MAC itself "
            "knew the node was Offline.",
            f"- **Computed, not measured**, at MAC's defaults (interval "
            f"{DEFAULTS['probe']:g} s, scrape and evaluation {DEFAULTS['scrape']:g} s, `for:` "
            f"{DEFAULTS['for']:g} s, group_wait {DEFAULTS['group_wait']:g} s), from the steps "
            f"above scaled to those settings: median about **{at_default:.0f} s**, max about "
            f"**{at_default_max:.0f} s**. MAC_ALERT_FOR and MAC_ALERT_GROUP_WAIT shorten it "
            "(docs/alerts.md).",
        ]
    )
    print(body)
    if not args.no_write:
        update_section(
            "alert-latency", "Alerts: time from a node's death to the notification", body
        )


if __name__ == "__main__":
    main()
