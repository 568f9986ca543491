"""What admins and operators change: removal, maintenance, key resets, admin adds and edits."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from inventory.choices import EventKind
from inventory.models import Node, NodeEvent
from inventory.services.events import (
    announce_maintenance_on_commit,
    new_event,
    push_on_commit,
    record_event,
)


def remove_node(node: Node, *, actor: str, message: str) -> None:
    """Delete a node, leaving a 'deregistered' event that outlives it; open
    dashboards drop its row once the deletion is committed."""
    remove_nodes([node], actor=actor, message=message)


def remove_nodes(nodes: Iterable[Node], *, actor: str, message: str) -> int:
    """remove_node() for many nodes at once (admin actions): one push for all of them."""
    nodes = list(nodes)
    ids = [node.pk for node in nodes]
    with transaction.atomic():
        events = [
            new_event(node, EventKind.DEREGISTERED, message, actor=actor, data={"ip": node.ip})
            for node in nodes
        ]
        NodeEvent.objects.bulk_create(events)
        Node.objects.filter(pk__in=ids).delete()
        push_on_commit(removed=ids)
        # A node in maintenance has a silence; it goes with the node.
        announce_maintenance_on_commit(node.pk for node in nodes if node.maintenance)
    return len(ids)


def set_maintenance(node: Node, on: bool, *, actor: str, deferred: list[str] | None = None) -> bool:
    """Switch maintenance; returns False when it already had that value.

    `deferred` receives, in words, what could not follow the change at once (the
    silence, when the broker hangs) and is left to a poll."""
    return bool(set_maintenance_of([node], on, actor=actor, deferred=deferred))


def set_maintenance_of(
    nodes: Iterable[Node], on: bool, *, actor: str, deferred: list[str] | None = None
) -> list[Node]:
    """set_maintenance() for many nodes, one push; returns the nodes it changed."""
    nodes = list(nodes)
    with transaction.atomic():
        # Locked in id order, so that two admins acting on overlapping sets cannot
        # deadlock; only rows that still have the old value change (and get an event).
        pending = Node.objects.select_for_update().filter(
            pk__in=[node.pk for node in nodes], maintenance=not on
        )
        ids = set(pending.order_by("pk").values_list("pk", flat=True))
        now = timezone.now()
        Node.objects.filter(pk__in=ids).update(maintenance=on, maintenance_changed_at=now)
        changed = [node for node in nodes if node.pk in ids]
        kind = EventKind.MAINTENANCE_ON if on else EventKind.MAINTENANCE_OFF
        for node in changed:
            node.maintenance, node.maintenance_changed_at = on, now
        NodeEvent.objects.bulk_create(
            new_event(node, kind, f"maintenance {'on' if on else 'off'}", actor=actor)
            for node in changed
        )
        push_on_commit(changed)
        announce_maintenance_on_commit((node.pk for node in changed), deferred)
    return changed


def reset_node_key(node: Node, *, actor: str) -> None:
    """Forget the node's key; its next registration from its current address gets a new one."""
    reset_node_keys([node], actor=actor)


def reset_node_keys(nodes: Iterable[Node], *, actor: str) -> int:
    """reset_node_key() for many nodes at once, one push."""
    nodes = list(nodes)
    with transaction.atomic():
        Node.objects.filter(pk__in=[node.pk for node in nodes]).update(node_key_hash="")
        for node in nodes:
            node.node_key_hash = ""
        NodeEvent.objects.bulk_create(
            new_event(
                node,
                EventKind.KEY_RESET,
                f"node key reset; the next registration from {node.ip} receives a new key",
                actor=actor,
            )
            for node in nodes
        )
        push_on_commit(nodes)
    return len(nodes)


def add_node_by_admin(node: Node, *, actor: str) -> None:
    """Save a node an admin created by hand, with its 'registered' event."""
    with transaction.atomic():
        node.save(force_insert=True)
        record_event(node, EventKind.REGISTERED, "added by an admin", actor=actor)
        push_on_commit([node])


def edit_node_by_admin(node: Node, changes: dict[str, tuple], *, actor: str) -> None:
    """Save an admin's edit: one 'edited' event listing the fields, plus the specific ones."""
    with transaction.atomic():
        if "maintenance" in changes:
            node.maintenance_changed_at = timezone.now()
        node.save()
        if not changes:
            return
        if "maintenance" in changes:
            on = bool(changes["maintenance"][1])
            kind = EventKind.MAINTENANCE_ON if on else EventKind.MAINTENANCE_OFF
            record_event(node, kind, f"maintenance {'on' if on else 'off'}", actor=actor)
            announce_maintenance_on_commit([node.pk])
        if "ip" in changes:
            old, new = changes["ip"]
            record_event(
                node,
                EventKind.IP_CHANGED,
                f"address changed from {old} to {new}",
                actor=actor,
                data={"old": old, "new": new},
            )
        names = ", ".join(sorted(changes))
        record_event(
            node,
            EventKind.EDITED,
            f"edited by {actor}: {names}",
            actor=actor,
            data={"fields": sorted(changes)},
        )
        push_on_commit([node])
