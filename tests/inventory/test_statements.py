"""inventory.services.statements writes and reads what the ORM would, on either database."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.db.models import Q

from inventory.models import Node, NodeEvent
from inventory.services import statements
from inventory.services.events import new_event
from inventory.services.keys import new_node_key

pytestmark = pytest.mark.django_db(transaction=True)


def _node(hostname: str, ip: str) -> Node:
    return Node(hostname=hostname, ip=ip, node_key_hash=new_node_key()[1])


def test_it_inserts_a_node_and_its_event_together() -> None:
    node = _node("stmt-a", "127.0.9.1")
    event = new_event(node, "registered", "registered from 127.0.9.1", actor="agent")

    assert statements.insert_with(node, event, "node", unless_taken=True)

    stored = NodeEvent.objects.get(pk=event.pk)
    assert stored.node_id == node.pk == Node.objects.get(hostname="stmt-a").pk
    assert (stored.kind, stored.message, stored.actor) == (
        "registered",
        "registered from 127.0.9.1",
        "agent",
    )
    assert stored.data == {}


def test_it_writes_neither_row_when_the_node_conflicts() -> None:
    Node.objects.create(hostname="stmt-b", ip="127.0.9.2")
    clash = _node("stmt-b", "127.0.9.3")
    event = new_event(clash, "registered", "registered from 127.0.9.3")

    with transaction.atomic():
        assert not statements.insert_with(clash, event, "node", unless_taken=True)

    assert clash.pk is None and event.pk is None
    assert Node.objects.filter(hostname="stmt-b").count() == 1
    assert not NodeEvent.objects.filter(message="registered from 127.0.9.3").exists()


def test_it_updates_every_column_as_save_does() -> None:
    node = Node.objects.create(hostname="stmt-c", ip="127.0.9.4")
    before = node.updated_at
    node.gpu_count, node.labels = 4, {"rack": "b2"}

    statements.update(node)

    stored = Node.objects.get(pk=node.pk)
    assert (stored.gpu_count, stored.labels) == (4, {"rack": "b2"})
    assert stored.updated_at > before  # auto_now, as save() sets it


def test_it_finds_rows_with_a_query_compiled_once() -> None:
    a = Node.objects.create(hostname="stmt-d", ip="127.0.9.5")
    b = Node.objects.create(hostname="stmt-e", ip="127.0.9.6")
    query = statements.PreparedSelect(
        Node,
        lambda hostname, ip: Node.objects.filter(Q(hostname=hostname) | Q(ip=ip)).order_by("id"),
        hostname="stand-in",
        ip="0.0.0.0",
    )

    assert [n.pk for n in query.run(hostname="stmt-d", ip="127.0.9.6")] == [a.pk, b.pk]
    assert [n.pk for n in query.run(hostname="stmt-e", ip="127.0.9.99")] == [b.pk]
    assert query.run(hostname="nobody", ip="127.0.9.98") == []


def test_it_refuses_a_query_whose_parameters_are_not_the_stand_ins() -> None:
    query = statements.PreparedSelect(
        Node, lambda hostname: Node.objects.filter(hostname=hostname, gpu_count=3), hostname="x"
    )

    with pytest.raises(ValueError, match="one parameter per stand-in"):
        query.run(hostname="stmt-f")
