"""The node inventory: one row per agent node, and the history of what happened to it.

A Node is created by registration (POST /api/v1/register) and removed only by
deregistration (`mac stop agent`) or an admin; probing changes its status but
never deletes it, so registration survives reboots of master and agents.
"""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.utils import timezone

from inventory.choices import (
    AgentNetwork,
    Diagnosis,
    EventKind,
    GpuVendor,
    NodeStatus,
    StatusReason,
)

# The node at a glance, defined once: the dashboard and its live pushes carry these
# (Node.summary()), the API's nodes list shows them (NodeSerializer, and the detail adds
# what the agent reported), and every sweep loads them (healthcheck.sweep, with the
# exporters it probes), so a field shown anywhere is current everywhere.
SUMMARY_FIELDS = (
    "id",
    "hostname",
    "ip",
    "status",
    "status_reason",
    "status_detail",
    "diagnosis",
    "maintenance",
    "gpu_vendor",
    "gpu_count",
    "gpu_model",
    "agent_network",
    "exporter_health",
    "labels",
    "last_seen",
    "status_changed_at",
    "registered_at",
)


class Node(models.Model):
    """An agent node the master probes and feeds to Prometheus."""

    hostname = models.CharField(max_length=253, unique=True)
    ip = models.GenericIPAddressField(unique=True, unpack_ipv4=False)
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.UNKNOWN)
    status_reason = models.CharField(
        max_length=32, choices=StatusReason.choices, default=StatusReason.REGISTERED, blank=True
    )
    status_detail = models.CharField(max_length=300, blank=True, default="")
    diagnosis = models.CharField(max_length=32, choices=Diagnosis.choices, default="", blank=True)
    registered_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(null=True, blank=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    gpu_vendor = models.CharField(max_length=16, choices=GpuVendor.choices, default=GpuVendor.NONE)
    gpu_count = models.PositiveIntegerField(default=0)
    gpu_model = models.CharField(max_length=64, blank=True, default="")
    agent_network = models.CharField(
        max_length=8, choices=AgentNetwork.choices, blank=True, default=AgentNetwork.UNKNOWN
    )
    nics = models.JSONField(default=list, blank=True)
    # {"sys-exporter": 29101, ...}: what the agent said it runs.
    exporters = models.JSONField(default=dict, blank=True)
    # {"sys-exporter": true, "dcgm-exporter": false, ...}: last probe of each liveness URL.
    exporter_health = models.JSONField(default=dict, blank=True)
    agent_version = models.CharField(max_length=64, blank=True, default="")
    machine_id = models.CharField(max_length=64, blank=True, default="")
    labels = models.JSONField(default=dict, blank=True)
    maintenance = models.BooleanField(default=False)
    # sha256 of the per-node key handed out at first registration; empty after an admin reset.
    node_key_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["hostname"]
        indexes = [
            models.Index(fields=["status"]),
            models.Index(fields=["gpu_vendor"]),
            models.Index(fields=["node_key_hash"]),
        ]

    def __str__(self) -> str:
        return self.hostname

    def summary(self) -> dict:
        """The node as the dashboard and live pushes show it: SUMMARY_FIELDS, JSON-ready."""
        return {name: _jsonable(getattr(self, name)) for name in SUMMARY_FIELDS}


def _jsonable(value):
    return value.isoformat() if isinstance(value, datetime) else value


class NodeEvent(models.Model):
    """One thing that happened to a node, with its reason; kept after deregistration."""

    node = models.ForeignKey(
        Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    hostname = models.CharField(max_length=253)  # kept when the node is gone
    kind = models.CharField(max_length=32, choices=EventKind.choices)
    message = models.CharField(max_length=500, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["node", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.hostname}: {self.get_kind_display()}"
