"""The nodes' Slurm view as the drain pass hands it over (inventory.services.scheduling):
the rows that changed are written and pushed with their new values, the others left."""

from __future__ import annotations

import math

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inventory.choices import EventKind
from inventory.models import Node, NodeEvent
from inventory.services import events as inventory_events
from inventory.services.scheduling import SLURM_FIELDS, UPDATE_BATCH, save_slurm_view
from testkit.factories import bulk_nodes, make_node

pytestmark = pytest.mark.django_db


@pytest.fixture
def pushed(monkeypatch) -> list[dict]:
    """The summaries save_slurm_view pushes to the dashboards once its transaction commits."""
    summaries: list[dict] = []
    monkeypatch.setattr(
        inventory_events, "queue_node_changes", lambda changes, removed: summaries.extend(changes)
    )
    return summaries


def test_it_writes_and_pushes_the_rows_that_changed_and_leaves_the_rest(
    pushed, django_capture_on_commit_callbacks
):
    same = make_node("gpu-01", slurm_state="idle", slurm_hold="none", slurm_reason="")
    drained = make_node("gpu-02", slurm_state="idle", slurm_hold="none")
    gone = make_node("gpu-03", slurm_state="idle", slurm_hold="none")  # no longer in Slurm
    fresh = make_node("gpu-04")
    long_reason = "MAC: GPU 3 XID 79 " + "x" * 600
    views = {
        same.pk: ("idle", "none", ""),
        drained.pk: ("drained", "mac", long_reason),
        fresh.pk: ("allocated", "none", ""),
    }
    event = NodeEvent(
        node_id=drained.pk, hostname="gpu-02", kind=EventKind.SLURM_DRAIN, message="Drained gpu-02"
    )

    with django_capture_on_commit_callbacks(execute=True):
        changed = save_slurm_view(views, [event])

    assert changed == sorted([drained.pk, gone.pk, fresh.pk])
    rows = {
        row[0]: row[1:]
        for row in Node.objects.values_list("id", "slurm_state", "slurm_hold", "slurm_reason")
    }
    assert rows == {
        same.pk: ("idle", "none", ""),
        drained.pk: ("drained", "mac", long_reason[:500]),
        gone.pk: ("", "", ""),
        fresh.pk: ("allocated", "none", ""),
    }
    assert sorted(
        (summary["id"], summary["slurm_state"], summary["slurm_reason"]) for summary in pushed
    ) == sorted(
        (node_id, state, reason)
        for node_id, (state, _hold, reason) in rows.items()
        if node_id != same.pk
    )
    assert list(NodeEvent.objects.filter(kind=EventKind.SLURM_DRAIN).values_list("node_id")) == [
        (drained.pk,)
    ]


def test_a_whole_partition_changing_is_written_as_one_view(
    pushed, django_capture_on_commit_callbacks
):
    nodes = bulk_nodes(2_500)
    views = {node.pk: ("drained", "mac", f"MAC: {node.hostname}") for node in nodes[::2]}

    with (
        django_capture_on_commit_callbacks(execute=True),
        CaptureQueriesContext(connection) as queries,
    ):
        changed = save_slurm_view(views)

    assert changed == sorted(node.pk for node in nodes[::2])
    updates = [q for q in queries if q["sql"].startswith('UPDATE "inventory_node"')]
    # 1,250 rows, UPDATE_BATCH at a time (fewer where the database takes fewer variables
    # in one statement, as SQLite): a handful of statements, not one per row
    batch = min(UPDATE_BATCH, connection.ops.bulk_batch_size(["pk", "pk", *SLURM_FIELDS], nodes))
    assert len(updates) == math.ceil(len(changed) / batch) < 10
    assert dict(Node.objects.exclude(slurm_state="").values_list("id", "slurm_reason")) == {
        node_id: reason for node_id, (_state, _hold, reason) in views.items()
    }
    assert sorted(summary["id"] for summary in pushed) == changed
    with django_capture_on_commit_callbacks(execute=True):
        assert save_slurm_view(views) == []  # nothing changed since: nothing written or pushed
    assert len(pushed) == len(changed)
