"""inventory.services.register_node called directly: the dedupe and key rules, and
every reported field stored."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from inventory import services
from inventory.models import Node, NodeEvent


@pytest.mark.django_db
def test_it_reregisters_a_node_without_its_key_from_its_own_address_in_one_row():
    reg = services.Registration(hostname="gpu-03", ip="198.18.0.3", gpu_count=4)
    first = services.register_node(reg)
    again = services.register_node(services.Registration(hostname="gpu-03", ip="198.18.0.3"))

    assert first.created and first.node_key
    assert not again.created and again.node.pk == first.node.pk
    node = Node.objects.get()
    assert node.gpu_count == 0  # the second report wins
    kinds = list(NodeEvent.objects.filter(node=node).values_list("kind", flat=True))
    assert sorted(kinds) == ["registered", "reregistered"]


@pytest.mark.django_db
def test_it_still_refuses_a_keyless_takeover_of_a_known_hostname():
    services.register_node(services.Registration(hostname="gpu-04", ip="198.18.0.4"))
    with pytest.raises(services.NodeKeyRequired):
        services.register_node(services.Registration(hostname="gpu-04", ip="198.18.0.44"))
    with pytest.raises(services.AddressTaken):
        services.register_node(
            services.Registration(hostname="gpu-05", ip="198.18.0.4"), source="198.18.0.9"
        )
    assert list(Node.objects.values_list("hostname", "ip")) == [("gpu-04", "198.18.0.4")]


@pytest.mark.django_db
def test_it_stores_a_new_node_with_every_reported_field():
    reg = services.Registration(
        hostname="gpu-06",
        ip="198.18.0.6",
        gpu_vendor="amd",
        gpu_count=8,
        nics=[{"name": "bnxt_re0", "speed": 400.0, "up": True, "note": None}],
        exporters={"sys-exporter": 29101, "rocm-exporter": 29200},
        agent_version="1.2.3",
        machine_id="abc",
        labels={"rack": "b2"},
    )
    result = services.register_node(reg)

    node = Node.objects.get(pk=result.node.pk)
    assert node.hostname == "gpu-06" and node.ip == "198.18.0.6"
    assert {name: getattr(node, name) for name in reg.reported()} == reg.reported()
    assert node.updated_at is not None and node.node_key_hash
    assert services.node_key_matches(node, result.node_key)
    assert list(node.events.values_list("kind", flat=True)) == ["registered"]


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite has one writer at a time already"
)
@pytest.mark.django_db(transaction=True, reset_sequences=True)
@pytest.mark.parametrize("spares", [0, 2], ids=["ids-across-the-cap", "ids-past-the-cap"])
def test_two_first_registrations_at_once_never_pass_the_cap_together(settings, make_node, spares):
    settings.MAX_NODES = 2
    make_node("gpu-01")  # id 1: the first newcomer's id is within the cap, the second's not
    for spare in range(spares):  # or both ids past it
        make_node(f"spare-{spare}").delete()
    registered, errors = threading.Event(), []

    def first_newcomer() -> None:
        try:
            # Its transaction stays open (and uncommitted) a while after its count.
            with transaction.atomic():
                services.register_node(services.Registration(hostname="gpu-02", ip="198.18.1.2"))
                registered.set()
                time.sleep(0.5)
        except Exception as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=first_newcomer)
    thread.start()
    assert registered.wait(10)
    # Its row is not committed yet; this count waits for it instead of passing beside it.
    with pytest.raises(services.NodeLimitReached, match="MAC_MAX_NODES"):
        services.register_node(services.Registration(hostname="gpu-03", ip="198.18.1.3"))
    thread.join(10)

    assert errors == []
    assert sorted(Node.objects.values_list("hostname", flat=True)) == ["gpu-01", "gpu-02"]
