"""A throwaway PostgreSQL database holding a simulated fleet, for the dashboard's benchmark
and screenshots.

The database comes from bench.benchdb.bench_database(); `populate()` fills it with a
plausible fleet: NVIDIA, AMD and CPU-only nodes, a few offline for each diagnosis,
some in maintenance.
"""

from __future__ import annotations

import ipaddress
import random
from datetime import timedelta

FIRST_IP = ipaddress.IPv4Address("10.12.0.1")


OFFLINE_CASES = [
    ("timeout", "ip_forward_off", "no answer within 3.0 s"),
    ("refused", "service_down", "connection refused on 29101"),
    ("timeout", "host_down", "no answer within 3.0 s"),
    ("bad_body", "exporter_broken", "HTML instead of metrics"),
]


def populate(count: int, offline_every: int = 0, seed: int = 7, start: int = 0) -> None:
    """`count` nodes named like racks (node-a01-03), numbered from `start`.

    offline_every=N makes every Nth node Offline with one of the diagnoses, in turn.
    """
    from django.utils import timezone

    from inventory.choices import EventKind, NodeStatus
    from inventory.models import Node, NodeEvent

    rng = random.Random(seed)
    now = timezone.now()
    nodes = []
    for i in range(start, start + count):
        rack, slot = divmod(i, 16)
        vendor = ("nvidia", "nvidia", "amd", "none")[rack % 4]
        exporters = {"sys-exporter": 29101, "nic-exporter": 29500, "sw-exporter": 29300}
        if vendor == "nvidia":
            exporters["dcgm-exporter"] = 29150
        elif vendor == "amd":
            exporters["rocm-exporter"] = 29200
        node = Node(
            hostname=f"node-{chr(97 + rack // 100 % 26)}{rack % 100:02d}-{slot + 1:02d}",
            ip=str(FIRST_IP + i),
            status=NodeStatus.ONLINE,
            status_reason="ok",
            gpu_vendor=vendor,
            gpu_count=0 if vendor == "none" else 8,
            exporters=exporters,
            exporter_health={name: True for name in exporters},
            last_seen=now - timedelta(seconds=rng.randint(1, 29)),
            status_changed_at=now - timedelta(hours=rng.randint(2, 300)),
            agent_version="0.1.0",
            registered_at=now - timedelta(days=11),
            nics=[{"name": f"mlx5_{n}", "driver": "mlx5_core"} for n in range(2)],
        )
        if offline_every and i % offline_every == 1:
            reason, diagnosis, detail = OFFLINE_CASES[(i // offline_every) % len(OFFLINE_CASES)]
            node.status, node.status_reason = NodeStatus.OFFLINE, reason
            node.diagnosis, node.status_detail = diagnosis, detail
            node.last_seen = now - timedelta(minutes=rng.randint(3, 400))
            node.exporter_health = {name: name == "nic-exporter" for name in exporters}
            if diagnosis in ("host_down", "service_down"):
                node.exporter_health = {name: False for name in exporters}
        elif offline_every and i % (offline_every * 3) == 5:
            node.maintenance = True
        elif offline_every and i % (offline_every * 5) == 9:
            node.status, node.status_reason, node.last_seen = NodeStatus.UNKNOWN, "registered", None
        nodes.append(node)
    created = Node.objects.bulk_create(nodes, batch_size=2000)
    events = []
    for node in created:
        events += [
            NodeEvent(node=node, hostname=node.hostname, kind=EventKind.REGISTERED,
                      message=f"registered from {node.ip}", actor="agent",
                      created_at=now - timedelta(days=11)),
            NodeEvent(node=node, hostname=node.hostname, kind=EventKind.ONLINE,
                      message="sys-exporter answered", created_at=now - timedelta(days=11)),
        ]  # fmt: skip
        if node.status == NodeStatus.OFFLINE:
            events.append(
                NodeEvent(node=node, hostname=node.hostname, kind=EventKind.OFFLINE,
                          message=f"{node.get_status_reason_display()}: {node.status_detail}",
                          created_at=node.last_seen)
            )  # fmt: skip
    NodeEvent.objects.bulk_create(events, batch_size=5000)


# A throwaway staff user in a throwaway database, for the browser and the WebSocket clients.
OPERATOR = ("bench", "bench-pass")


def make_operator() -> None:
    from django.contrib.auth import get_user_model

    username, password = OPERATOR
    get_user_model().objects.create_user(username, password=password, is_staff=True)
