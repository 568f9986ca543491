"""inventory_node keeps half of each page free so heartbeat writes stay heap-only (HOT).

What the fillfactor guarantees is room on each page for a new version of every row
there: one round of updates is heap-only whatever else runs. (Later rounds also depend
on PostgreSQL pruning the old versions, which waits for every older snapshot in the
database, an autoanalyze or another session's: under load that made this test flaky
when it counted three rounds.) The counts are this session's own
(pg_stat_xact_user_tables): no other writer can change them. They are taken before and
after the update, since PostgreSQL 15 and later keep a session's counts of its earlier
transactions there until they are flushed (within a second): a test just before this
one on the same connection would otherwise add its own.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.utils import timezone

from inventory.models import Node

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL storage parameter")
def test_heartbeat_updates_of_last_seen_are_heap_only():
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'inventory_node'")
        assert "fillfactor=50" in (cursor.fetchone()[0] or [])
    seen = timezone.now()
    nodes = Node.objects.bulk_create(
        [Node(hostname=f"hot-{i}", ip=f"10.77.0.{i + 1}", last_seen=seen) for i in range(200)]
    )
    with transaction.atomic():
        before = own_update_counts()
        Node.objects.filter(id__in=[node.pk for node in nodes]).update(last_seen=timezone.now())
        after = own_update_counts()
    updated, hot = after[0] - before[0], after[1] - before[1]
    assert updated == 200
    assert hot >= 0.9 * updated, f"{hot} of {updated} updates were heap-only"


def own_update_counts() -> tuple[int, int]:
    """(row updates, heap-only updates) of inventory_node in this transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
            "WHERE relname = 'inventory_node'"
        )
        return cursor.fetchone()
