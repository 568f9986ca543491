"""The faster registration paths (issue 13) give what the plain ones gave.

- Request bodies are validated by one serializer per thread (validated_body) instead
  of a new one per request: the same data for a good body, the same 400 for a bad one,
  however the two follow each other.
- A registration without a node key inserts first (ON CONFLICT DO NOTHING) and looks
  the node up only when the hostname or address is taken: the dedupe rules hold.
"""

from __future__ import annotations

import pytest
from rest_framework.exceptions import ValidationError

from inventory import services
from inventory.api.serializers import (
    DeregistrationSerializer,
    RegistrationSerializer,
    validated_body,
)
from inventory.models import Node, NodeEvent

GOOD = {
    "hostname": "GPU-01",
    "gpu_vendor": "nvidia",
    "gpu_count": 8,
    "nics": [{"name": "mlx5_0", "port": 1}],
    "exporters": {"sys-exporter": 29101},
    "labels": {"rack": "a1"},
}
BAD = [
    {},
    {"hostname": 5},
    {"hostname": "gpu-01", "gpu_count": "8"},
    {"hostname": "gpu-01", "nics": [{"name": "x" * 300}]},
    {"hostname": "gpu-01", "exporters": {"Bad Name": 1}},
    {"hostname": "gpu-01", "labels": {"rack": 1}},
    [],
    None,
]


def _fresh(serializer_class, data) -> tuple[dict | None, object]:
    serializer = serializer_class(data=data)
    if serializer.is_valid():
        return dict(serializer.validated_data), None
    return None, serializer.errors


def _shared(serializer_class, data) -> tuple[dict | None, object]:
    try:
        return validated_body(serializer_class, data), None
    except ValidationError as exc:
        return None, exc.detail


def test_it_validates_bodies_in_turn_exactly_as_a_new_serializer_does():
    for body in [GOOD, *BAD, GOOD, BAD[2], {**GOOD, "labels": {}}]:
        assert _shared(RegistrationSerializer, body) == _fresh(RegistrationSerializer, body), body
    assert validated_body(RegistrationSerializer, GOOD)["hostname"] == "gpu-01"
    assert validated_body(RegistrationSerializer, {"hostname": "a"})["nics"] == []


def test_it_keeps_one_serializer_per_class():
    assert validated_body(DeregistrationSerializer, {"hostname": "Gpu-02"}) == {
        "hostname": "gpu-02"
    }
    assert _shared(DeregistrationSerializer, {}) == _fresh(DeregistrationSerializer, {})


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
