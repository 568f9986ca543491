"""MacDrainBudgetSpent: the drain stopped at its budget and left unhealthy nodes in service.

The drain pass (scheduler.drainpass) knows the moment its budget (MAC_DRAIN_BUDGET) holds
a drain back; it posts this alert to Alertmanager itself, as the sweep posts its node
alerts (alerting.nodealerts), rather than leave it to a Prometheus rule over a master
metric, which would fire a scrape, an evaluation and a `for:` later. The post is made
again after every pass while the budget is spent (``endsAt`` a few intervals ahead, so a
master that stops posting lets it end), and with ``endsAt`` now when it no longer is: that
end is sent again, the same, by the next passes (alerting.nodealerts.RESEND_ENDS: an
Alertmanager whose clock is behind the master's loses an end it takes for a future one).

Labels: alertname, cluster_name, severity (warning: the unhealthy GPUs page on their own,
MacGpuUnhealthy). Annotations list the nodes it would have drained, how many MAC keeps
drained, and what to do. Only MAC_SLURM_DRAIN=on posts it: a dry run changes nothing,
so nothing is held back.

A failed post is logged and simply made again by the next pass.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache

from alerting.client import Alertmanager, AlertmanagerUnavailable
from alerting.nodealerts import RESEND_ENDS, ends_after, runbook_url

log = logging.getLogger(__name__)

ALERTNAME = "MacDrainBudgetSpent"
SEVERITY = "warning"
RUNBOOK = "docs/slurm.md#the-drain-budget"
POSTED_KEY = "alerting:drain-budget:posted"
ENDED_KEY = "alerting:drain-budget:ended"  # [endsAt, posts left] of the end to send again
# How many host names the annotation lists before it says "and N more".
LISTED = 20


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def labels() -> dict[str, str]:
    return {"alertname": ALERTNAME, "cluster_name": settings.CLUSTER_NAME, "severity": SEVERITY}


def hosts_words(hosts: list[str]) -> str:
    shown = ", ".join(hosts[:LISTED])
    return shown + (f" and {len(hosts) - LISTED} more" if len(hosts) > LISTED else "")


def firing_alert(state: dict, now: datetime, starts_at: str = "") -> dict:
    held = state["held_back"]
    base = (settings.PUBLIC_URL or "http://localhost:28080").rstrip("/")
    return {
        "labels": labels(),
        "annotations": {
            "summary": (
                f"Drain budget spent: MAC keeps {state['drained']} of {state['fleet']} Slurm "
                f"nodes drained (MAC_DRAIN_BUDGET={state['budget']}) and left "
                f"{len(held)} unhealthy node(s) in service"
            ),
            "would_drain": hosts_words(held),
            "description": (
                "MAC drains at most MAC_DRAIN_BUDGET of the fleet at once, so that a bad "
                "rule or a bad driver release cannot empty the cluster. These nodes have "
                "an unhealthy GPU verdict and still take jobs."
            ),
            "fix": (
                "Look at why so many nodes are unhealthy at once (the fleet page, filter "
                "'needs action'). Drain a node by hand with "
                '`scontrol update NodeName=<node> State=DRAIN Reason="..."`, or raise '
                "MAC_DRAIN_BUDGET on the master if the faults are real."
            ),
            "node_url": f"{base}/?health=unhealthy",
            "runbook_url": runbook_url(RUNBOOK),
            "source": "mac-master",
        },
        "startsAt": starts_at or _iso(now),
        "endsAt": _iso(now + timedelta(seconds=ends_after())),
        "generatorURL": f"{base}/?health=unhealthy",
    }


def resolved_alert(ends_at: str) -> dict:
    return {
        "labels": labels(),
        "annotations": {"summary": "Drain budget no longer spent", "source": "mac-master"},
        "endsAt": ends_at,
    }


def post_budget_alert(state: dict, client: Alertmanager | None = None) -> str:
    """Fire (again) or end the alert for the pass's budget `state`; "" or why a post failed.

    `state`: {"mode", "budget", "fleet", "limit", "drained", "held_back": [hostnames]}.
    """
    spent = state.get("mode") == "on" and bool(state.get("held_back"))
    posted = cache.get(POSTED_KEY) or ""  # when the alert began
    ending = cache.get(ENDED_KEY)  # an end posted lately, to send again
    if not spent and not posted and not ending:
        return ""
    now = datetime.now(UTC)
    if spent:
        alert = firing_alert(state, now, posted)
    else:
        alert = resolved_alert(_iso(now) if posted else ending[0])
    client = client or Alertmanager.from_settings()
    try:
        client.post_alerts([alert])
    except AlertmanagerUnavailable as exc:
        log.warning("drain budget alert not posted (the next pass posts it again): %s", exc)
        return str(exc)
    if spent:
        cache.set(POSTED_KEY, alert["startsAt"], None)
        cache.delete(ENDED_KEY)
    elif posted:
        cache.delete(POSTED_KEY)
        cache.set(ENDED_KEY, [alert["endsAt"], RESEND_ENDS], None)
    elif ending[1] > 1:
        cache.set(ENDED_KEY, [ending[0], ending[1] - 1], None)
    else:
        cache.delete(ENDED_KEY)
    return ""
