"""The node as the scheduler sees it: its Slurm state on the row, MAC's decisions in its history.

The drain (scheduler.drainpass) reads Slurm after every sweep and hands the result here:
the rows whose Slurm state, holder or reason changed are written and pushed to open
dashboards once the transaction commits, and the decisions it recorded join the nodes'
histories in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db import transaction

from inventory.models import Node, NodeEvent
from inventory.services.events import push_on_commit

SLURM_FIELDS = ("slurm_state", "slurm_hold", "slurm_reason")
ID_CHUNK = 5000
# Rows per UPDATE of bulk_update (one CASE per field over them).
UPDATE_BATCH = 1000


def save_slurm_view(
    views: Mapping[int, tuple[str, str, str]], events: Iterable[NodeEvent] = ()
) -> list[int]:
    """Write each node's (state, hold, reason) where it changed, and add `events`.

    Nodes missing from `views` are not Slurm nodes (or no longer): their Slurm fields are
    cleared. Returns the ids of the rows that changed.
    """
    events = list(events)
    with transaction.atomic():
        current = {
            row[0]: tuple(row[1:])
            for row in Node.objects.order_by()
            .values_list("id", *SLURM_FIELDS)
            .iterator(chunk_size=ID_CHUNK)
        }
        changed: dict[int, tuple[str, str, str]] = {}
        for node_id, now in current.items():
            wanted = tuple(value[:limit] for value, limit in zip(
                views.get(node_id, ("", "", "")), (32, 8, 500), strict=True
            ))  # fmt: skip
            if wanted != now:
                changed[node_id] = wanted
        # The changed rows, for their summaries on the dashboards, written in a few
        # statements: a pass that changes thousands of nodes (Slurm's view of a whole
        # partition) must not be one UPDATE each.
        ids = sorted(changed)
        nodes = []
        for start in range(0, len(ids), ID_CHUNK):
            nodes.extend(Node.objects.filter(id__in=ids[start : start + ID_CHUNK]))
        for node in nodes:
            node.slurm_state, node.slurm_hold, node.slurm_reason = changed[node.id]
        Node.objects.bulk_update(nodes, SLURM_FIELDS, batch_size=UPDATE_BATCH)
        alive = set(current)
        NodeEvent.objects.bulk_create(
            [event for event in events if event.node_id in alive], batch_size=1000
        )
        push_on_commit(nodes)
    return ids


def clear_slurm_view() -> int:
    """Forget every node's Slurm state (the drain was turned off); how many rows changed."""
    nodes = list(Node.objects.exclude(slurm_state="", slurm_hold="", slurm_reason=""))
    if not nodes:
        return 0
    with transaction.atomic():
        Node.objects.filter(id__in=[node.id for node in nodes]).update(
            slurm_state="", slurm_hold="", slurm_reason=""
        )
        for node in nodes:
            node.slurm_state = node.slurm_hold = node.slurm_reason = ""
        push_on_commit(nodes)
    return len(nodes)
