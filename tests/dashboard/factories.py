"""Small node factories for the dashboard tests (no JSON fixtures)."""

from __future__ import annotations

import itertools

from django.utils import timezone

from inventory.choices import Diagnosis, GpuVendor, NodeStatus, StatusReason
from inventory.models import Node

_seq = itertools.count(1)


def make_node(**fields) -> Node:
    """A saved node with distinct hostname and IP unless given."""
    n = next(_seq)
    values = {
        "hostname": f"gpu-{n:05d}",
        "ip": f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}",
        "status": NodeStatus.ONLINE,
        "status_reason": StatusReason.OK,
        "gpu_vendor": GpuVendor.NVIDIA,
        "gpu_count": 8,
        "last_seen": timezone.now(),
        "exporters": {"sys-exporter": 29101, "dcgm-exporter": 29150, "nic-exporter": 29500},
    }
    values.update(fields)
    return Node.objects.create(**values)


def make_offline(**fields) -> Node:
    """An offline node with the ip_forward diagnosis (the guide's hardest case)."""
    values = {
        "status": NodeStatus.OFFLINE,
        "status_reason": StatusReason.TIMEOUT,
        "status_detail": "no answer within 3.0 s",
        "diagnosis": Diagnosis.IP_FORWARD_OFF,
    }
    values.update(fields)
    return make_node(**values)


def bulk_nodes(count: int, start: int = 0, **fields) -> None:
    """Many nodes at once (paging and the 10,000-node page)."""
    now = timezone.now()
    Node.objects.bulk_create(
        Node(
            hostname=f"bulk-{start + i:05d}",
            ip=f"10.200.{(start + i) >> 8}.{(start + i) & 255}",
            status=NodeStatus.ONLINE,
            status_reason=StatusReason.OK,
            last_seen=now,
            **fields,
        )
        for i in range(count)
    )
