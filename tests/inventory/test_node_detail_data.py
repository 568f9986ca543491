"""The agent endpoints answer with serializers built once per process (a ModelSerializer
builds its fields for every instance, a sixth of a registration's CPU); what they
answer must stay exactly what NodeDetailSerializer gives."""

from __future__ import annotations

import pytest

from inventory import services
from inventory.api.serializers import NodeDetailSerializer, node_detail_data
from inventory.models import Node

pytestmark = pytest.mark.django_db


def test_it_matches_the_detail_serializer_for_a_node_with_history():
    reg = services.Registration(
        hostname="gpu-01",
        ip="10.0.0.5",
        gpu_vendor="nvidia",
        gpu_count=8,
        nics=[{"name": "mlx5_0", "port": 1}],
        exporters={"sys-exporter": 29101},
        labels={"rack": "a1"},
    )
    services.register_node(reg)
    services.register_node(reg)  # a second event
    node = Node.objects.get(hostname="gpu-01")

    assert node_detail_data(node) == NodeDetailSerializer(node).data
    assert [e["kind"] for e in node_detail_data(node)["events"]] == [
        "reregistered",
        "registered",
    ]


def test_it_uses_the_events_the_caller_holds():
    result = services.register_node(services.Registration(hostname="gpu-02", ip="10.0.0.6"))

    fresh = node_detail_data(result.node, result.history)
    context = {"recent_events": result.history}
    assert fresh == NodeDetailSerializer(result.node, context=context).data
    assert fresh == node_detail_data(Node.objects.get(pk=result.node.pk))
