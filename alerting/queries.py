"""What the dashboard and /health read from Alertmanager: firing alerts and silences.

Every answer says whether Alertmanager could be asked (`available`) and, when not,
why (`error`): pages show "alerts unavailable: <why>" and keep working.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from dataclasses import asdict, dataclass, field

from django.conf import settings

from alerting.client import Alertmanager, AlertmanagerUnavailable, node_of_label
from alerting.silences import CREATED_BY
from inventory.models import Node

# The live list carries at most this many alerts (the count is always the full one).
LIST_LIMIT = 100
# Each group of the fleet page carries at most this many of its nodes (its count is
# always the full one; the node table's `?alert=` filter lists them all).
GROUP_NODES = 50
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass
class AlertSnapshot:
    """The fleet's firing alerts (not silenced, not inhibited), as the dashboard lists them."""

    available: bool
    error: str = ""
    count: int = 0
    alerts: list[dict] = field(default_factory=list)
    # The fleet page's view: alerts grouped by alertname and severity (group_rows).
    groups: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def digest(self) -> str:
        """Changes exactly when what a page shows changes."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()


def alert_row(alert: dict) -> dict:
    """One alert as the pages show it: codes and plain values only."""
    labels = alert.get("labels", {})
    annotations = alert.get("annotations", {})
    status = alert.get("status", {})
    return {
        "fingerprint": alert.get("fingerprint", ""),
        "alertname": labels.get("alertname", ""),
        "severity": labels.get("severity", ""),
        "summary": annotations.get("summary", "") or labels.get("alertname", ""),
        "hostname": labels.get("hostname") or labels.get("Hostname") or "",
        "node": labels.get("node", ""),
        "starts_at": alert.get("startsAt", ""),
        "silenced": bool(status.get("silencedBy")),
        "runbook_url": _web_link(annotations.get("runbook_url", "")),
    }


def _web_link(url: object) -> str:
    """`url` when it is an http(s) link, else "": anyone who can post to Alertmanager writes
    annotations, and a `javascript:` one would run on the master's origin when clicked."""
    if not isinstance(url, str):
        return ""
    try:
        scheme = urllib.parse.urlsplit(url.strip()).scheme.lower()
    except ValueError:  # e.g. an unclosed "[" in the host
        return ""
    return url.strip() if scheme in {"http", "https"} else ""


def _sort_key(row: dict) -> tuple:
    return (_SEVERITY_ORDER.get(row["severity"], 9), row["starts_at"], row["fingerprint"])


def group_rows(rows: list[dict]) -> list[dict]:
    """Alerts by alertname and severity: a count, how many nodes (a node has one alert per
    GPU of some), a summary, and the first GROUP_NODES nodes, each once; the most severe
    groups first, then the largest."""
    groups: dict[tuple[str, str], dict] = {}
    seen: dict[tuple[str, str], set] = {}
    for row in rows:
        key = (row["alertname"], row["severity"])
        group = groups.setdefault(
            key,
            {"alertname": key[0], "severity": key[1], "count": 0, "node_count": 0,
             "since": row["starts_at"], "summary": row["summary"], "nodes": []},
        )  # fmt: skip
        group["count"] += 1
        group["since"] = min(group["since"], row["starts_at"]) or row["starts_at"]
        node = row["node"] or row["hostname"]
        if node in seen.setdefault(key, set()):
            continue
        seen[key].add(node)
        group["node_count"] += 1
        if len(group["nodes"]) < GROUP_NODES:
            group["nodes"].append(
                {"node": row["node"], "hostname": row["hostname"], "summary": row["summary"]}
            )
    return sorted(
        groups.values(),
        key=lambda g: (_SEVERITY_ORDER.get(g["severity"], 9), -g["count"], g["alertname"]),
    )


def firing_alerts(client: Alertmanager | None = None) -> AlertSnapshot:
    client = client or Alertmanager.from_settings()
    try:
        alerts = client.alerts()
    except AlertmanagerUnavailable as exc:
        return AlertSnapshot(available=False, error=str(exc))
    # A shared Alertmanager holds other clusters' alerts too: their node="1" is not ours.
    rows = sorted((alert_row(alert) for alert in alerts if _ours(alert)), key=_sort_key)
    _keep_known_nodes(rows)
    return AlertSnapshot(
        available=True, count=len(rows), alerts=rows[:LIST_LIMIT], groups=group_rows(rows)
    )


def _keep_known_nodes(rows: list[dict]) -> None:
    """Blank each row's `node` unless it names a node of the inventory, so the pages link
    only to nodes that exist: a site's own alert may carry a node label of its own
    ("rack-7"), and an alert may outlive its node (deleted, still firing until resolved)."""
    ids = {node_of_label(row["node"]) for row in rows} - {None}
    known = {str(pk) for pk in Node.objects.filter(pk__in=ids).values_list("pk", flat=True)}
    for row in rows:
        if row["node"] not in known:
            row["node"] = ""


def nodes_with_alert(alertname: str, client: Alertmanager | None = None) -> list[int]:
    """Ids of this cluster's nodes with a firing `alertname` alert (raises
    AlertmanagerUnavailable when Alertmanager cannot say)."""
    client = client or Alertmanager.from_settings()
    ids = set()
    for alert in client.alerts():
        labels = alert.get("labels", {})
        node = node_of_label(labels.get("node", ""))
        if labels.get("alertname") == alertname and node is not None and _ours(alert):
            ids.add(node)
    return sorted(ids)


def silence_row(silence: dict) -> dict:
    return {
        "id": silence.get("id", ""),
        "state": silence.get("status", {}).get("state", ""),
        "created_by": silence.get("createdBy", ""),
        "by_mac": silence.get("createdBy") == CREATED_BY,
        "comment": silence.get("comment", ""),
        "starts_at": silence.get("startsAt", ""),
        "ends_at": silence.get("endsAt", ""),
        "matchers": [
            f"{m.get('name')}{'=' if m.get('isEqual', True) else '!'}"
            f"{'~' if m.get('isRegex') else ''}{m.get('value')}"
            for m in silence.get("matchers", [])
        ],
    }


def _applies_to(silence: dict, node_id: int) -> bool:
    """A live silence of this cluster with an exact matcher on this node's id."""
    if silence.get("status", {}).get("state") not in {"active", "pending"}:
        return False
    if not _silence_ours(silence):
        return False
    return any(
        m.get("name") == "node" and m.get("value") == str(node_id) and not m.get("isRegex")
        and m.get("isEqual", True)
        for m in silence.get("matchers", [])
    )  # fmt: skip


def _ours(alert: dict) -> bool:
    """An alert of this cluster (a shared Alertmanager holds other clusters' too)."""
    cluster = alert.get("labels", {}).get("cluster_name", settings.CLUSTER_NAME)
    return cluster == settings.CLUSTER_NAME


def _silence_ours(silence: dict) -> bool:
    """A silence that can hold this cluster's alerts: not one whose exact cluster_name
    matcher leaves this cluster out (another MAC master's, on a shared Alertmanager)."""
    for m in silence.get("matchers", []):
        if m.get("name") == "cluster_name" and not m.get("isRegex"):
            equal = m.get("value") == settings.CLUSTER_NAME
            if equal != m.get("isEqual", True):
                return False
    return True


def alerts_and_silences(client: Alertmanager | None = None) -> dict:
    """The dashboard's Alerts page: every alert of this cluster that Alertmanager holds
    (silenced ones too, flagged), and the silences in force or to come."""
    client = client or Alertmanager.from_settings()
    try:
        alerts = client.alerts(silenced=True)
        silences = client.silences()
    except AlertmanagerUnavailable as exc:
        return {"available": False, "error": str(exc), "alerts": [], "silences": []}
    live = [
        s
        for s in silences
        if s.get("status", {}).get("state") in {"active", "pending"} and _silence_ours(s)
    ]
    return {
        "available": True,
        "error": "",
        "alerts": sorted((alert_row(a) for a in alerts if _ours(a)), key=_sort_key),
        "silences": sorted((silence_row(s) for s in live), key=lambda s: s["ends_at"]),
    }


def node_alerts(node_id: int, client: Alertmanager | None = None) -> dict:
    """One node's firing alerts (silenced ones too, flagged) and the silences on it."""
    client = client or Alertmanager.from_settings()
    try:
        alerts = client.alerts(silenced=True)
        silences = client.silences()
    except AlertmanagerUnavailable as exc:
        return {"available": False, "error": str(exc), "alerts": [], "silences": []}
    mine = [
        alert
        for alert in alerts
        if alert.get("labels", {}).get("node") == str(node_id) and _ours(alert)
    ]
    return {
        "available": True,
        "error": "",
        "alerts": sorted((alert_row(alert) for alert in mine), key=_sort_key),
        "silences": [silence_row(s) for s in silences if _applies_to(s, node_id)],
    }
