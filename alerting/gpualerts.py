"""The master's GPU verdict alerts, posted to Alertmanager beside its node alerts.

Every GPU whose verdict is not healthy (inventory.models.GpuHealth, written by the sweep)
on a node not in maintenance is one alert, in the same post as MacNodeOffline
(alerting.nodealerts), with the same lifetime rules: ``endsAt`` a few probe intervals
ahead while it lasts, ``endsAt`` now once the GPU is healthy again, its node in
maintenance or gone.

- ``MacGpuUnhealthy``, severity critical: it pages;
- ``MacGpuDegraded``, severity warning: thermal or power slowdown, rising correctable
  errors, a row remap pending.

A GPU that goes from degraded to unhealthy ends the one alert and fires the other. An
application's own XID (13: restart_app, healthy) is no alert at all.

Labels hold identities only (alertname, node, hostname, cluster_name, severity, gpu):
a maintenance silence (node, cluster_name) covers them. The words are annotations, the
very words the node page and the API show: ``gpu`` (index, UUID, serial), ``evidence``
(each item in one line, contract.verdicts.Evidence.words), ``action`` and its ``fix``;
``jobs``: the Slurm jobs that held the GPU when the fault happened (job id and user).

The jobs come from job attribution (scheduler.jobread), a layer above this one: it
answers the `gpu_jobs` signal (connected in scheduler.apps), so this module names the
jobs without importing the scheduler.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.dispatch import Signal

from contract.verdicts import ACTION_LABELS, Evidence, HealthAction, HealthState, gpu_fix
from inventory.models import GpuHealth

ALERTNAMES = {HealthState.UNHEALTHY: "MacGpuUnhealthy", HealthState.DEGRADED: "MacGpuDegraded"}
SEVERITIES = {HealthState.UNHEALTHY: "critical", HealthState.DEGRADED: "warning"}
POSTED_KEY = "alerting:gpu-alerts:posted"
# The ends posted lately, sent again (alerting.nodealerts.RESEND_ENDS: why):
# [[key, hostname, endsAt, posts left]]
ENDED_KEY = "alerting:gpu-alerts:ended"
RUNBOOK = "docs/gpu-health.md#what-to-do"
# Sent with `rows` (firing_rows' dicts, each with "fault_at"); a receiver answers
# {(node id, GPU index): "job 4242 (alice), ..."} for the GPUs it knows jobs of.
gpu_jobs = Signal()


def alert_key(row: dict) -> str:
    """What identifies one posted GPU alert: node, GPU and alert name."""
    return f"{row['node']}/{row['gpu']}/{row['alertname']}"


def firing_rows() -> list[dict]:
    """GPUs that should alert: not healthy, on a node not in maintenance."""
    rows = (
        GpuHealth.objects.exclude(state=HealthState.HEALTHY)
        .filter(node__maintenance=False)
        .order_by("node_id", "index")
        .values(
            "node_id", "node__hostname", "index", "uuid", "serial", "vendor", "state", "action",
            "evidence", "since",
        )
    )  # fmt: skip
    firing = []
    for row in rows:
        state = read_state(row["state"])
        evidence = read_evidence(row["evidence"])
        firing.append({
            **row,
            "node": row["node_id"],
            "hostname": row["node__hostname"],
            "gpu": row["index"],
            "alertname": ALERTNAMES[state],
            "severity": SEVERITIES[state],
            "state": state,
            "evidence": evidence,
            "fault_at": fault_time({"evidence": evidence, "since": row["since"]}),
        })  # fmt: skip
    if firing:
        for _, answer in gpu_jobs.send(sender=None, rows=firing):
            for row in firing:
                row["jobs"] = (answer or {}).get((row["node"], row["gpu"]), "")
    return firing


def read_state(value: str) -> HealthState:
    """A stored verdict's state; one this release does not know (a later release's, a
    hand-edited row) is taken as unhealthy: it pages rather than stops every alert's post."""
    try:
        state = HealthState(value)
    except ValueError:
        return HealthState.UNHEALTHY
    return state if state in ALERTNAMES else HealthState.UNHEALTHY


def read_evidence(items) -> list[Evidence]:
    """A stored verdict's evidence; an item this release cannot read is said in its own
    words (its detail, else the raw item) rather than dropped or raised on."""
    evidence = []
    for item in items if isinstance(items, list) else []:
        try:
            evidence.append(Evidence.from_dict(item))
        except (AttributeError, TypeError, ValueError):
            detail = item.get("detail") if isinstance(item, dict) else None
            evidence.append(
                Evidence("", "", str(detail or item), HealthState.UNHEALTHY, HealthAction.NONE, 0.0)
            )
    return evidence


def fault_time(row: dict) -> datetime:
    """When the GPU's fault happened: its earliest dated evidence, else when the verdict turned."""
    earliest = min((item.at for item in row["evidence"] if item.at > 0), default=0)
    return datetime.fromtimestamp(earliest, UTC) if earliest else row["since"]


def labels(row: dict) -> dict[str, str]:
    return {
        "alertname": row["alertname"],
        "node": str(row["node"]),
        "hostname": row["hostname"],
        "cluster_name": settings.CLUSTER_NAME,
        "severity": row["severity"],
        "gpu": str(row["gpu"]),
    }


def gpu_words(row: dict) -> str:
    """ "GPU 3 (UUID GPU-..., serial 1650...)", as the evidence names it."""
    probe = Evidence("", "", "", HealthState.HEALTHY, HealthAction.NONE, 0.0, str(row["gpu"]),
                     row["uuid"], row["serial"])  # fmt: skip
    return probe.gpu_words()


def firing_alert(row: dict, ends_at: str, node_url: str, runbook: str) -> dict:
    state, evidence = row["state"], row["evidence"]
    try:
        action = HealthAction(row["action"])
    except ValueError:  # a later release's action: its own name, with no fix to offer
        action_words, fix = str(row["action"]), ""
    else:
        action_words, fix = (
            ACTION_LABELS[action],
            gpu_fix(action, str(row["gpu"]), row["uuid"], row["vendor"]),
        )
    jobs = row.get("jobs", "")
    annotations = {
        "summary": f"{gpu_words(row)} on {row['hostname']} is {state}: {action_words}"
        + (f"; it held {jobs}" if jobs else ""),
        "gpu": gpu_words(row),
        "jobs": jobs,
        "evidence": "\n".join(item.words() for item in evidence),
        "action": str(row["action"]),
        "fix": fix,
        "node_url": node_url,
        "runbook_url": runbook,
        "source": "mac-master",
    }
    return {
        "labels": labels(row),
        "annotations": {key: value for key, value in annotations.items() if value},
        "startsAt": row["since"].astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "endsAt": ends_at,
        "generatorURL": node_url,
    }


def resolved_alert(key: str, hostname: str, ends_at: str, node_url: str) -> dict:
    node, gpu, alertname = key.split("/")
    row = {"node": node, "hostname": hostname, "gpu": gpu, "alertname": alertname}
    # A name no longer known (posted by an earlier release) is ended all the same.
    row["severity"] = next(
        (SEVERITIES[state] for state, name in ALERTNAMES.items() if name == alertname),
        SEVERITIES[HealthState.UNHEALTHY],
    )
    return {
        "labels": labels(row),
        "annotations": {
            "summary": f"GPU {gpu} on {hostname} is healthy again",
            "source": "mac-master",
        },
        "endsAt": ends_at,
        "generatorURL": node_url,
    }


def build(
    rows: list[dict], posted: dict[str, str], ends_at: str, now_iso: str, node_url, runbook: str
) -> tuple[list[dict], dict[str, str], list[str]]:
    """The GPU alerts of one post: (alerts, what now fires {key: hostname}, keys ended)."""
    firing = {alert_key(row): row["hostname"] for row in rows}
    alerts = [firing_alert(row, ends_at, node_url(row["node"]), runbook) for row in rows]
    # Ended: no longer firing, or firing under another host name (the node was renamed:
    # the alert under the old name is another alert, ended here rather than left to time out).
    ended = sorted(key for key, hostname in posted.items() if firing.get(key) != hostname)
    alerts += [
        resolved_alert(key, posted[key], now_iso, node_url(int(key.split("/")[0]))) for key in ended
    ]
    return alerts, firing, ended


def resend_ends(
    ended: list[list], firing: dict[str, str], node_url
) -> tuple[list[dict], list[list]]:
    """The ends posted lately, to send again, and the entries sent: not one whose alert
    fires again under the same labels (`firing`: {key: hostname})."""
    kept = [entry for entry in ended if firing.get(entry[0]) != entry[1]]
    alerts = [
        resolved_alert(key, hostname, ends_at, node_url(int(key.split("/")[0])))
        for key, hostname, ends_at, _ in kept
    ]
    return alerts, kept


def next_ended(
    kept: list[list], posted: dict[str, str], ended: list[str], now_iso: str, sends: int
) -> list[list]:
    """ENDED_KEY after a post Alertmanager took: what it sent again, one post fewer to go,
    and what it ended now, `sends` posts to go."""
    again = [[*entry[:3], entry[3] - 1] for entry in kept if entry[3] > 1]
    return again + [[key, posted[key], now_iso, sends] for key in ended]
