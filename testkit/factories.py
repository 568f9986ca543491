"""Nodes for tests and benchmarks: one factory instead of one per test package.

`make_node` leaves a row the way a fresh registration does (status Unknown, a node
key, the sys- and nic-exporter listed); `online_gpu_node` and `offline_node` are the
states the dashboard starts from, and `bulk_nodes` fills pages with many rows at once.
Hostnames and addresses are distinct across a whole test session unless given.

Default addresses come from 198.18.0.0/15, the block reserved for benchmarking
networks, so a sweep that happens to probe a row made here aims at no real network.
A test that probes for real passes the address of the server it started.

Needs Django set up (the models are imported on first use), like every caller.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inventory.models import Node

_sequence = itertools.count(1)
# 198.18.0.0/15 as 2 x 256 blocks of 250 hosts (.1 to .250): no .0 or .255 addresses.
_HOSTS_PER_BLOCK = 250
_CAPACITY = 2 * 256 * _HOSTS_PER_BLOCK

DEFAULT_EXPORTERS = {"sys-exporter": 29101, "nic-exporter": 29500}
GPU_EXPORTERS = {"sys-exporter": 29101, "dcgm-exporter": 29150, "nic-exporter": 29500}


def benchmark_address(n: int) -> str:
    """The n-th address of 198.18.0.0/15 (wrapping after 128,000)."""
    block, host = divmod(n % _CAPACITY, _HOSTS_PER_BLOCK)
    return f"198.{18 + block // 256}.{block % 256}.{host + 1}"


def build_node(
    hostname: str | None = None, ip: str | None = None, *, key: str | None = None, **fields: Any
) -> Node:
    """An unsaved Node with the defaults of make_node (for bulk_create)."""
    from inventory.models import Node
    from inventory.services import hash_node_key, new_node_key

    n = next(_sequence)
    fields.setdefault("exporters", dict(DEFAULT_EXPORTERS))
    return Node(
        hostname=hostname or f"node-{n:05d}",
        ip=ip or benchmark_address(n),
        node_key_hash=new_node_key()[1] if key is None else hash_node_key(key),
        **fields,
    )


def make_node(
    hostname: str | None = None, ip: str | None = None, *, key: str | None = None, **fields: Any
) -> Node:
    """A saved node as registration leaves it; `fields` set any other column.

    `key` is the node key whose hash is stored (a fresh random one by default), so a
    test can act as that node's agent.
    """
    node = build_node(hostname, ip, key=key, **fields)
    node.save(force_insert=True)
    return node


def online_gpu_node(hostname: str | None = None, ip: str | None = None, **fields: Any) -> Node:
    """A saved Online node with 8 NVIDIA GPUs, seen just now, its dcgm-exporter listed."""
    from django.utils import timezone

    from inventory.choices import GpuVendor, NodeStatus, StatusReason

    values: dict[str, Any] = {
        "status": NodeStatus.ONLINE,
        "status_reason": StatusReason.OK,
        "gpu_vendor": GpuVendor.NVIDIA,
        "gpu_count": 8,
        "last_seen": timezone.now(),
        "exporters": dict(GPU_EXPORTERS),
    }
    values.update(fields)
    return make_node(hostname, ip, **values)


def offline_node(hostname: str | None = None, ip: str | None = None, **fields: Any) -> Node:
    """A saved GPU node gone Offline with the ip_forward diagnosis (the guide's hardest case)."""
    from inventory.choices import Diagnosis, NodeStatus, StatusReason

    values: dict[str, Any] = {
        "status": NodeStatus.OFFLINE,
        "status_reason": StatusReason.TIMEOUT,
        "status_detail": "no answer within 3.0 s",
        "diagnosis": Diagnosis.IP_FORWARD_OFF,
    }
    values.update(fields)
    return online_gpu_node(hostname, ip, **values)


def bulk_nodes(count: int, start: int = 0, **fields: Any) -> list[Node]:
    """`count` Online nodes named bulk-<start>..., saved in one statement (paging, big pages)."""
    from django.utils import timezone

    from inventory.choices import NodeStatus, StatusReason
    from inventory.models import Node

    values: dict[str, Any] = {
        "status": NodeStatus.ONLINE,
        "status_reason": StatusReason.OK,
        "last_seen": timezone.now(),
        "exporters": {},
    }
    values.update(fields)
    nodes = [build_node(f"bulk-{start + i:05d}", **values) for i in range(count)]
    return Node.objects.bulk_create(nodes)
