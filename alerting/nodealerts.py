"""The master's own node alerts, posted to Alertmanager (API v2) as Prometheus posts its own.

The sweep knows a node is Offline, and why, seconds after it happens; a Prometheus rule
would learn it a scrape, an evaluation and a `for:` later, and only as label codes. So
after every sweep (healthcheck.sweep.publish) the alerting.tasks.post_node_alerts task
posts, in one request:

- every Offline node that is not in maintenance, as MacNodeOffline, with `endsAt`
  ENDS_AFTER_INTERVALS probe intervals ahead: the next sweep posts it again, and a master
  that stops posting lets it end by itself instead of firing forever;
- every node it posted before that is no longer such (back Online, put in maintenance,
  deregistered), with `endsAt` now: Alertmanager resolves it at once;
- the ends it posted on the last RESEND_ENDS posts, again, with the same `endsAt`, as
  Prometheus re-sends its resolved alerts: an Alertmanager whose clock is behind the
  master's takes an `endsAt` of the master's "now" for a moment still ahead, keeps the
  firing post's later `endsAt` (minutes ahead) and so loses the end; the same end sent
  a sweep later, once that moment has passed on its clock too, resolves the alert.

Labels are exactly those of the Prometheus rule MacNodeOffline, which stays as the
backstop for a master that cannot post (scraping/prometheus/alerts.yml): alertname,
node, hostname, cluster_name, severity and down_since. Both alerts then have one
fingerprint and Alertmanager deduplicates them. down_since (the moment the node left
Online, as the master recorded it; also a label of mac_node_up) makes each incident an
alert of its own: Prometheus re-sends a resolved alert every minute for 15 minutes, with
its old startsAt and endsAt, and Alertmanager lets such a resend *replace* a later alert
of the same labels, so without it a node that went Offline again within those minutes
had its new alert ended by the old one. Alertmanager's node route groups by it too
(alerting.amconfig): a resend of an ended incident then lands in that incident's group,
which has nothing firing to notify, not in the next incident's, where it would add a
resolved alert and so send that incident's notification a second time.

The words come in annotations, from MAC's own data: summary, reason, diagnosis,
description, fix, node_url, runbook_url, and `source`.

The same post carries the GPU verdict alerts (alerting.gpualerts: MacGpuUnhealthy,
MacGpuDegraded), under the same rules.

Which nodes were posted as firing is kept in the cache, and only replaced after a post
that Alertmanager accepted: a failed post is simply made again after the next sweep
(each post carries the whole state). Every post's outcome is counted for the master's
/metrics and /health (post_stats).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache

from alerting import gpualerts
from alerting.client import Alertmanager, AlertmanagerUnavailable
from contract.diagnosis import describe
from contract.outcomes import DIAGNOSIS_LABELS, OUTCOME_LABELS, Diagnosis, Outcome
from inventory.choices import NodeStatus
from inventory.models import Node

ALERTNAME = "MacNodeOffline"
SEVERITY = "critical"
SOURCE = "mac-master"
RUNBOOK = "docs/troubleshooting.md#a-node-is-offline-macnodeoffline"
# Every alert the master posts itself (alerting.amconfig routes them quickly, per node).
POSTED_ALERTNAMES = (ALERTNAME, *gpualerts.ALERTNAMES.values())
# endsAt this many intervals ahead, and never under ENDS_AFTER_MIN seconds: posts late
# by a loaded worker (sweeps and posts that expired, seen for over 20 s on a busy
# machine) must not let the alert end, since the node route sends that end, and the
# next firing, within a probe interval (MAC_ALERT_NODE_GROUP_INTERVAL). Two minutes
# also outlast the backstop rule's own way to firing at the defaults (its `for:` 1m,
# a scrape and an evaluation), so a poster that stops never makes the alert blink.
ENDS_AFTER_INTERVALS = 4
ENDS_AFTER_MIN = 120.0

# The label that makes each incident of a node an alert (and, in Alertmanager's node
# route, a group) of its own.
INCIDENT_LABEL = "down_since"
# The alert's identity, the backstop rule's too (scraping/prometheus/alerts.yml).
LABEL_NAMES = ("alertname", "node", "hostname", "cluster_name", "severity", INCIDENT_LABEL)

POSTED_KEY = "alerting:node-alerts:posted"  # {node id: [hostname, down_since]}
# The ends posted lately, sent again: [[node id, hostname, down_since, endsAt, posts left]]
ENDED_KEY = "alerting:node-alerts:ended"
# How many posts after an end carry it again (a sweep apart each: at the defaults they
# cover an Alertmanager up to a minute and a half behind the master's clock).
RESEND_ENDS = 3
STATS_KEY = "alerting:node-alerts:stats"
LOCK_KEY = "alerting:node-alerts:lock"
POSTED_FIELDS = ("id", "hostname")


def ends_after() -> float:
    """Seconds from a post to its alerts' endsAt."""
    return max(ENDS_AFTER_INTERVALS * settings.PROBE_INTERVAL, ENDS_AFTER_MIN)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def incident_start(
    status_changed_at: datetime, maintenance_changed_at: datetime | None
) -> datetime:
    """When a node's current incident began: it left Online, or maintenance changed
    since. A node still Offline when its maintenance ends is a new alert: the one that
    maintenance ended is resolved, and the backstop's re-sends of that end (15 minutes
    of them) must not end the new one."""
    if maintenance_changed_at is not None and maintenance_changed_at > status_changed_at:
        return maintenance_changed_at
    return status_changed_at


def down_since(status_changed_at: datetime, maintenance_changed_at: datetime | None = None) -> str:
    """The down_since label of a node's incident (incident_start, to the second, UTC): the
    same text in the master's post and in its /metrics' mac_node_up."""
    moment = incident_start(status_changed_at, maintenance_changed_at)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def row_down_since(row: dict) -> str:
    return down_since(row["status_changed_at"], row["maintenance_changed_at"])


def labels(node_id: int, hostname: str, since: str) -> dict[str, str]:
    """The alert's identity: the same six labels the backstop rule gives it."""
    values = (ALERTNAME, str(node_id), hostname, settings.CLUSTER_NAME, SEVERITY, since)
    # A record from before down_since existed ends the alert it posted without one.
    return {name: value for name, value in zip(LABEL_NAMES, values, strict=True) if value}


def node_url(node_id: int) -> str:
    base = settings.PUBLIC_URL or "http://localhost:28080"
    return f"{base.rstrip('/')}/nodes/{node_id}/"


def runbook_url(path: str = RUNBOOK) -> str:
    base = settings.RUNBOOK_BASE_URL
    return f"{base.rstrip('/')}/{path}" if base else path


def _reason_words(row: dict) -> str:
    try:
        words = OUTCOME_LABELS[Outcome(row["status_reason"])]
    except ValueError:
        words = row["status_reason"]
    return f"{words} ({row['status_detail']})" if row["status_detail"] else words


def firing_alert(row: dict, now: datetime) -> dict:
    """One Offline node as MacNodeOffline, firing until a few intervals from now."""
    code = row["diagnosis"] or Diagnosis.NONE
    meaning, fix = describe(code)
    try:
        diagnosis = DIAGNOSIS_LABELS.get(Diagnosis(code), code) if code else ""
    except ValueError:
        # A code this release does not know (a newer one's row, rolled back): its own
        # words, or one node's code would stop every node's and GPU's alert.
        diagnosis = code
    annotations = {
        "summary": f"Node {row['hostname']} is offline",
        "reason": _reason_words(row),
        "diagnosis": diagnosis,
        "description": meaning or "The master's probe of sys-exporter (:29101) fails.",
        "fix": fix or "Run `mac doctor` on the node.",
        "node_url": node_url(row["id"]),
        "runbook_url": runbook_url(),
        "source": SOURCE,
    }
    return {
        "labels": labels(row["id"], row["hostname"], row_down_since(row)),
        "annotations": {key: value for key, value in annotations.items() if value},
        # When the node went down, for people (the email's "Since:"); the incident's
        # identity is down_since, which maintenance ending moves.
        "startsAt": _iso(row["status_changed_at"]),
        "endsAt": _iso(now + timedelta(seconds=ends_after())),
        "generatorURL": node_url(row["id"]),
    }


def resolved_alert(node_id: int, hostname: str, since: str, now: datetime | str) -> dict:
    """The end of a node's alert: same labels, endsAt now (or the end's, sent again)."""
    return {
        "labels": labels(node_id, hostname, since),
        "annotations": {"summary": f"Node {hostname} is back", "source": SOURCE},
        "endsAt": now if isinstance(now, str) else _iso(now),
        "generatorURL": node_url(node_id),
    }


def offline_rows() -> list[dict]:
    """The nodes that should alert: Offline and not in maintenance."""
    return list(
        Node.objects.filter(status=NodeStatus.OFFLINE, maintenance=False)
        .order_by("id")
        .values(
            "id",
            "hostname",
            "status_reason",
            "status_detail",
            "diagnosis",
            "status_changed_at",
            "maintenance_changed_at",
        )
    )


@dataclass
class Post:
    """What one post sent, and why it failed ("" when Alertmanager took it)."""

    firing: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    error: str = ""
    skipped: bool = False
    gpus_firing: list[str] = field(default_factory=list)  # "node/gpu/alertname"
    gpus_resolved: list[str] = field(default_factory=list)
    # Ends of earlier posts sent again (RESEND_ENDS).
    resent: list[int] = field(default_factory=list)
    gpus_resent: list[str] = field(default_factory=list)


def posted_record(rows: list[dict]) -> dict[int, list[str]]:
    """What a post that fired these rows leaves in POSTED_KEY."""
    return {row["id"]: [row["hostname"], row_down_since(row)] for row in rows}


def read_posted(value: dict | None) -> dict[int, tuple[str, str]]:
    """POSTED_KEY as {node id: (hostname, down_since)}; a record written before down_since
    existed holds the hostname alone."""
    found = {}
    for key, entry in (value or {}).items():
        host, since = (entry, "") if isinstance(entry, str) else entry
        found[int(key)] = (host, since)
    return found


def resend_ends(ended: list[list], current: dict[int, list[str]]) -> tuple[list[dict], list[list]]:
    """The ends posted lately, to send again (ENDED_KEY's entries), and the entries sent:
    not one whose alert fires again under the same labels (`current`, posted_record's),
    which its end would resolve."""
    kept = [entry for entry in ended if list(current.get(entry[0], ())) != [entry[1], entry[2]]]
    alerts = [resolved_alert(node, host, since, ends_at) for node, host, since, ends_at, _ in kept]
    return alerts, kept


def next_ended(
    kept: list[list], posted: dict[int, tuple[str, str]], resolved: list[int], now: datetime
) -> list[list]:
    """ENDED_KEY after a post Alertmanager took: what it sent again, one post fewer to go,
    and what it ended now, RESEND_ENDS posts to go."""
    again = [[*entry[:4], entry[4] - 1] for entry in kept if entry[4] > 1]
    return again + [[node, *posted[node], _iso(now), RESEND_ENDS] for node in resolved]


def build(
    rows: list[dict], posted: dict[int, tuple[str, str]], now: datetime
) -> tuple[list[dict], Post]:
    """The alerts of one post: the firing rows, and the ends of the others posted before,
    an earlier incident of a node that is Offline again (or renamed) included."""
    firing = [firing_alert(row, now) for row in rows]
    current = posted_record(rows)
    # An alert is gone when its node no longer fires it under the same labels: back,
    # in maintenance, deregistered, in a new incident, or renamed.
    gone = {
        node_id: (host, since)
        for node_id, (host, since) in posted.items()
        if tuple(current.get(node_id, ())) != (host, since)
    }
    ends = [
        resolved_alert(node_id, host, since, now) for node_id, (host, since) in sorted(gone.items())
    ]
    return firing + ends, Post(firing=sorted(current), resolved=sorted(gone))


def post_node_alerts(client: Alertmanager | None = None) -> Post:
    """Post the fleet's node alerts once (see the module docstring); never raises for
    Alertmanager's sake, the outcome is counted instead."""
    # One post at a time: two overlapping posts could end a node's alert after the
    # newer one fired it. The lock outlives a hung post by its timeout only.
    timeout = settings.ALERTMANAGER_TIMEOUT
    token = secrets.token_hex(8)
    # As long as a probe interval: a post of thousands of faulty GPUs' job names may take
    # longer than Alertmanager's timeout, and must not lose its lock to the next post.
    if not cache.add(LOCK_KEY, token, timeout=int(max(timeout + 5, settings.PROBE_INTERVAL))):
        return Post(skipped=True)
    try:
        client = client or Alertmanager(settings.ALERTMANAGER_URL, timeout)
        posted = read_posted(cache.get(POSTED_KEY))
        gpus_posted = cache.get(gpualerts.POSTED_KEY) or {}
        rows = offline_rows()
        now = datetime.now(UTC)
        try:
            alerts, post = build(rows, posted, now)
            again, kept = resend_ends(cache.get(ENDED_KEY) or [], posted_record(rows))
            gpus, gpus_firing, post.gpus_resolved = gpualerts.build(
                gpualerts.firing_rows(),
                gpus_posted,
                _iso(now + timedelta(seconds=ends_after())),
                _iso(now),
                node_url,
                runbook_url(gpualerts.RUNBOOK),
            )
            gpus_again, gpus_kept = gpualerts.resend_ends(
                cache.get(gpualerts.ENDED_KEY) or [], gpus_firing, node_url
            )
        except Exception as exc:
            # Nothing is posted for anyone: /health must say so, not stay green.
            record(Post(error=f"the post could not be built: {type(exc).__name__}: {exc}"))
            raise
        post.gpus_firing = sorted(gpus_firing)
        post.resent = sorted({entry[0] for entry in kept})
        post.gpus_resent = sorted({entry[0] for entry in gpus_kept})
        alerts += again + gpus + gpus_again
        if not alerts:
            # Nothing to tell Alertmanager, and nothing left untold: an earlier failure
            # (a broker that refused to queue the post) is over.
            record(post, sent=False)
            return post
        try:
            client.post_alerts(alerts)
        except AlertmanagerUnavailable as exc:
            post.error = str(exc)
        else:
            cache.set(POSTED_KEY, posted_record(rows), None)
            cache.set(ENDED_KEY, next_ended(kept, posted, post.resolved, now), None)
            cache.set(gpualerts.POSTED_KEY, gpus_firing, None)
            gpus_ended = gpualerts.next_ended(
                gpus_kept, gpus_posted, post.gpus_resolved, _iso(now), RESEND_ENDS
            )
            cache.set(gpualerts.ENDED_KEY, gpus_ended, None)
        record(post)
        return post
    finally:
        if cache.get(LOCK_KEY) == token:  # a lock outlived is the next post's
            cache.delete(LOCK_KEY)


def record(post: Post, *, sent: bool = True) -> None:
    """Count the post for /metrics and keep the last failure for /health; `sent` False:
    a round with nothing to post, which clears the failure without counting a post."""
    stats = cache.get(STATS_KEY) or {"ok": 0, "failed": 0, "last_error": "", "failing_since": 0}
    now = time.time()
    if post.error:
        stats["failed"] += 1
        stats["last_error"] = post.error
        stats["failing_since"] = stats["failing_since"] or now
    else:
        stats["ok"] += int(sent)
        stats["last_error"], stats["failing_since"] = "", 0
        stats["last_ok_at"] = now
    cache.set(STATS_KEY, stats, None)


def post_stats() -> dict:
    """{"ok": n, "failed": n, "last_error": why, "failing_since": unix time or 0, ...}."""
    return cache.get(STATS_KEY) or {"ok": 0, "failed": 0, "last_error": "", "failing_since": 0}
