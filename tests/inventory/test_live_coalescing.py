"""A burst of joins reaches the dashboards as one message, or a few, with every node.

Registrations queue their change on commit (inventory.live.queue_node_changes); one
sender per process sends what gathered within PUSH_WINDOW_SECONDS. Read from the real
Redis channel layer by a channel in the dashboard's group, as in test_live_pushes.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from inventory import live, services
from inventory.models import Node
from tests.inventory.test_live_pushes import Dashboard, Rollback, registration

pytestmark = pytest.mark.django_db(transaction=True)

BURST = 50


@pytest.fixture
def dashboard():
    board = Dashboard()
    yield board
    board.close()


def _register_in_threads(count: int) -> None:
    barrier = threading.Barrier(count)

    def agent(i: int) -> None:
        barrier.wait()
        try:
            services.register_node(registration(f"gpu-{i:02d}", f"10.60.0.{i + 1}"))
        finally:
            connection.close()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)


def _messages_until(dashboard: Dashboard, wanted: int) -> list[dict]:
    """Messages received until `wanted` distinct nodes were seen (or 10 s passed)."""
    messages, seen = [], set()
    deadline = time.monotonic() + 10
    while len(seen) < wanted and time.monotonic() < deadline:
        message = dashboard.receive()
        messages.append(message)
        seen.update(change["id"] for change in message["changes"])
    return messages


def test_a_burst_of_50_registrations_arrives_in_a_few_messages_with_every_node(dashboard):
    _register_in_threads(BURST)

    messages = _messages_until(dashboard, BURST)
    assert dashboard.nothing()

    ids = [change["id"] for message in messages for change in message["changes"]]
    assert sorted(ids) == sorted(Node.objects.values_list("pk", flat=True))
    assert len(ids) == BURST  # each node once, nothing lost
    assert len(messages) <= 5, [len(m["changes"]) for m in messages]
    by_id = {node.pk: node.summary() for node in Node.objects.all()}
    assert all(c == by_id[c["id"]] for m in messages for c in m["changes"])


def test_a_rollback_inside_the_window_leaves_only_the_committed_change(dashboard):
    services.register_node(registration("gpu-01", "10.0.0.1"))
    with pytest.raises(Rollback), transaction.atomic():
        services.register_node(registration("gpu-02", "10.0.0.2"))
        raise Rollback

    [change] = dashboard.receive()["changes"]
    assert change["hostname"] == "gpu-01"
    assert dashboard.nothing()


def test_two_changes_of_one_node_in_a_window_push_its_latest_summary(dashboard, monkeypatch):
    # Both changes must fall in one window: 0.2 s was not always enough on a busy
    # CI worker (the removal came in a second message).
    monkeypatch.setattr(live, "PUSH_WINDOW_SECONDS", 1.5)
    node = services.register_node(registration("gpu-01", "10.0.0.1")).node
    services.set_maintenance(node, True, actor="admin:root")

    message = dashboard.receive()
    assert [(c["id"], c["maintenance"]) for c in message["changes"]] == [(node.pk, True)]
    assert dashboard.nothing()


def test_a_node_that_joins_and_leaves_in_a_window_is_pushed_as_removed(dashboard, monkeypatch):
    # Both changes must fall in one window: 0.2 s was not always enough on a busy
    # CI worker (the removal came in a second message).
    monkeypatch.setattr(live, "PUSH_WINDOW_SECONDS", 1.5)
    node = services.register_node(registration("gpu-01", "10.0.0.1")).node
    node_id = node.pk
    services.remove_node(node, actor="agent", message="deregistered by the agent")

    message = dashboard.receive()
    assert (message["changes"], message["removed"]) == ([], [node_id])


def test_queued_changes_are_sent_by_an_explicit_flush_without_waiting(dashboard, monkeypatch):
    # Long enough to tell a flush from the window, short enough not to delay later tests.
    monkeypatch.setattr(live, "PUSH_WINDOW_SECONDS", 1.5)
    services.register_node(registration("gpu-01", "10.0.0.1"))
    began = time.monotonic()

    live.flush_node_changes()  # what the process does at exit

    [change] = dashboard.receive(timeout=1.0)["changes"]
    assert change["hostname"] == "gpu-01"
    assert time.monotonic() - began < 1.0
