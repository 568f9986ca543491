"""What admins and operators change: removal, maintenance, key resets, admin adds and edits."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from inventory.choices import EventKind
from inventory.models import GpuFault, Node, NodeEvent
from inventory.services.contention import atomic_again
from inventory.services.events import (
    announce_maintenance_on_commit,
    new_event,
    push_on_commit,
    record_event,
)
from inventory.services.health import forgotten_mark


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

    def switch() -> list[Node]:
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

    # A sweep writing the same rows may hold one of them (inventory.services.contention).
    return atomic_again(switch, "maintenance")


def reset_node_key(node: Node, *, actor: str) -> None:
    """Forget the node's key; its next registration from its current address gets a new one."""
    reset_node_keys([node], actor=actor)


def reset_node_keys(nodes: Iterable[Node], *, actor: str) -> int:
    """reset_node_key() for many nodes at once, one push; returns how many it reset."""
    nodes = list(nodes)
    with transaction.atomic():
        # Only rows still there: one deleted meanwhile has no key, and its event would
        # point at a node that is gone.
        present = set(
            Node.objects.select_for_update()
            .filter(pk__in=[node.pk for node in nodes])
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        nodes = [node for node in nodes if node.pk in present]
        Node.objects.filter(pk__in=present).update(node_key_hash="")
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


def forget_gpu_faults(node: Node, index: int, *, actor: str) -> tuple[str, int] | None:
    """Forget the fault history of the node's GPU `index` (kept by its serial, else its
    UUID), after a repair: MAC_GPU_FAULT_REBOOTS counts from nothing again. The node's
    fingerprint is replaced, so its next sweep judges its answer afresh and a verdict
    that history escalated to inspect_hardware ends there. Returns (the GPU's identity,
    the boots' rows forgotten), or None where the node has no GPU of that index."""
    gpu = node.gpus.filter(index=index).first()
    if gpu is None:
        return None
    identity = gpu.serial or gpu.uuid

    def forget() -> int:
        Node.objects.filter(pk=node.pk).update(health_digest=forgotten_mark())
        forgotten = GpuFault.objects.filter(gpu=identity).delete()[0] if identity else 0
        record_event(
            node,
            EventKind.FAULTS_FORGOTTEN,
            f"GPU {index} ({identity or 'no serial or UUID'}): {forgotten} boot(s) of its "
            "fault history forgotten; the next sweep judges it afresh",
            actor=actor,
            data={"index": index, "gpu": identity, "forgotten": forgotten},
        )
        return forgotten

    return identity, atomic_again(forget, "the forget of fault history")


def forget_fault_rows(rows, *, actor: str) -> int:
    """Delete fault-history rows picked in the admin, as forget_gpu_faults does for one
    GPU: each node concerned gets an event and is judged afresh at its next sweep."""
    picked = list(rows.select_related("node"))

    def forget() -> None:
        by_node: dict[int, list[GpuFault]] = {}
        for row in picked:
            if row.node_id is not None:
                by_node.setdefault(row.node_id, []).append(row)
        # The nodes the GPUs are on now too (a GPU moved since its faults were seen).
        identities = {row.gpu for row in picked}
        holders = Node.objects.filter(
            Q(pk__in=list(by_node)) | Q(gpus__serial__in=identities) | Q(gpus__uuid__in=identities)
        )
        # Locked in id order, before the fault rows (as the sweep writes fault rows after
        # its node rows); a sweep that locks them otherwise makes this run again.
        ids = sorted(set(holders.values_list("pk", flat=True)))
        locked = Node.objects.select_for_update(no_key=True).filter(pk__in=ids).order_by("pk")
        list(locked.values_list("pk"))
        Node.objects.filter(pk__in=ids).update(health_digest=forgotten_mark())
        GpuFault.objects.filter(pk__in=[row.pk for row in picked]).delete()
        NodeEvent.objects.bulk_create(
            new_event(
                faults[0].node,
                EventKind.FAULTS_FORGOTTEN,
                f"{len(faults)} boot(s) of GPU fault history forgotten ("
                + ", ".join(sorted({f"GPU {f.gpu_index} {f.fault}" for f in faults}))
                + "); the next sweep judges it afresh",
                actor=actor,
                data={"gpus": sorted({f.gpu for f in faults}), "forgotten": len(faults)},
            )
            for faults in by_node.values()
        )

    atomic_again(forget, "the forget of fault history")
    return len(picked)
