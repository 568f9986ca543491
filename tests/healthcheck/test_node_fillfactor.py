"""inventory_node keeps half of each page free so heartbeat writes stay heap-only (HOT)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from inventory.models import Node

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL storage parameter")
def test_heartbeat_updates_of_last_seen_are_heap_only():
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'inventory_node'")
        assert "fillfactor=50" in (cursor.fetchone()[0] or [])
    nodes = Node.objects.bulk_create(
        [Node(hostname=f"hot-{i}", ip=f"10.77.0.{i + 1}") for i in range(200)]
    )
    ids = [node.pk for node in nodes]
    before = update_counts()
    for _ in range(3):
        Node.objects.filter(id__in=ids).update(last_seen=timezone.now())
    after = update_counts()
    updated, hot = after[0] - before[0], after[1] - before[1]
    assert updated == 600
    assert hot >= 0.9 * updated


def update_counts() -> tuple[int, int]:
    """(row updates, heap-only updates) of inventory_node so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relname = 'inventory_node'"
        )
        return cursor.fetchone()
