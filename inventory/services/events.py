"""Node events, and the live push that follows a change once it commits."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from inventory.choices import EventKind
from inventory.live import queue_node_changes
from inventory.models import Node, NodeEvent
from inventory.signals import maintenance_changed


def new_event(
    node: Node, kind: str, message: str, *, actor: str = "", data: dict | None = None
) -> NodeEvent:
    """An unsaved event of the node (for bulk_create); its hostname outlives the node."""
    return NodeEvent(
        node=node,
        hostname=node.hostname,
        kind=kind,
        message=message[:500],
        actor=actor[:150],
        data=data or {},
    )


def record_event(
    node: Node, kind: str, message: str, *, actor: str = "", data: dict | None = None
) -> NodeEvent:
    """Add one event to the node's history."""
    event = new_event(node, kind, message, actor=actor, data=data)
    event.save(force_insert=True)
    return event


def push_on_commit(nodes: Iterable[Node] = (), removed: Iterable[int] = ()) -> None:
    """Show the change to open dashboards once the transaction that made it commits.

    Every change to the inventory goes through this module, so this is the only place
    (besides the sweep's batch) that pushes. Pushing before the commit could show a
    change that then rolls back, or reach a page that reloads before the row is
    visible. Summaries are taken now, when the change is made: a deleted node has no
    primary key by commit time. The committed change is queued, not sent: a burst of
    joins reaches the pages as one message (inventory.live.queue_node_changes).
    """
    changes = [node.summary() for node in nodes]
    removed = list(removed)
    if changes or removed:
        transaction.on_commit(lambda: queue_node_changes(changes, removed))


def record_ip_forward_reset(
    node: Node,
    *,
    when: datetime,
    link: str = "",
    carrier_at: datetime | None = None,
    reasserted: bool = False,
    resets: int = 1,
) -> NodeEvent:
    """A reset of net.ipv4.ip_forward that the node's sys-manager saw, in its history."""
    message = "IPv4 forwarding was reset to 0 on the node"
    if resets > 1:
        message = f"IPv4 forwarding was reset to 0 on the node {resets} times"
    if link:
        message += f", after {link} gained carrier"
    message += "; sys-manager set it back to 1" if reasserted else "; it stays 0 until fixed"
    data = {
        "when": when.isoformat(),
        "link": link,
        "carrier_at": carrier_at.isoformat() if carrier_at else None,
        "reasserted": reasserted,
        "resets": resets,
    }
    return record_event(node, EventKind.IP_FORWARD_RESET, message, actor="sys-manager", data=data)


def announce_maintenance_on_commit(
    node_ids: Iterable[int], deferred: list[str] | None = None
) -> None:
    """Tell the apps above the inventory (alerting: silences) once the change commits.

    A receiver that could not act now (the broker hangs) returns why, in words; those
    words land in `deferred`, so that the caller's answer can say that the change is
    saved and what will follow it later.
    """
    ids = sorted(set(node_ids))
    if not ids:
        return

    def announce() -> None:
        for _receiver, response in maintenance_changed.send_robust(sender=Node, node_ids=ids):
            if deferred is not None and isinstance(response, Exception | str) and str(response):
                deferred.append(str(response))

    transaction.on_commit(announce)
