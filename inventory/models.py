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
    HealthAction,
    HealthState,
    NodeStatus,
    SlurmHold,
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
    "health_state",
    "health_action",
    "health_evidence",
    "health_since",
    "health_streak",
    "slurm_state",
    "slurm_hold",
    "slurm_reason",
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
    # When maintenance last went on or off (inventory.services.changes): a node still
    # Offline when it ends is a new alert, not the one that maintenance ended
    # (alerting.nodealerts.incident_start).
    maintenance_changed_at = models.DateTimeField(null=True, blank=True)
    # The GPU verdict (inventory.services.health, docs/gpu-health.md): the worst of the
    # node's GPUs, the suggested repair, the evidence in one line, since when, and for how
    # many sweeps in a row, on the node's current boot, the verdict was read and stayed in
    # this state.
    health_state = models.CharField(
        max_length=16, choices=HealthState.choices, default=HealthState.HEALTHY
    )
    health_action = models.CharField(
        max_length=24, choices=HealthAction.choices, default=HealthAction.NONE
    )
    health_evidence = models.CharField(max_length=500, blank=True, default="")
    health_since = models.DateTimeField(default=timezone.now)
    health_streak = models.PositiveIntegerField(default=0)
    # Fingerprint of the GPU exporters' last verdict answers: an unchanged one is not parsed.
    health_digest = models.CharField(max_length=64, blank=True, default="", editable=False)
    # The boot the GPU exporters last reported (the kernel's boot_id).
    boot_id = models.CharField(max_length=64, blank=True, default="")
    # The node in Slurm as the drain last read it (scheduler.drainpass, docs/slurm.md):
    # its state in sinfo's words ("idle", "draining", "drained", "down", "reserved"...;
    # empty when it is not a Slurm node or the drain is off), who holds it out of
    # service, and the reason Slurm keeps ("MAC: ..." when MAC drained it).
    slurm_state = models.CharField(max_length=32, blank=True, default="")
    slurm_hold = models.CharField(
        max_length=8, choices=SlurmHold.choices, blank=True, default=SlurmHold.NONE
    )
    slurm_reason = models.CharField(max_length=500, blank=True, default="")
    # sha256 of the per-node key handed out at first registration; empty after an admin reset.
    node_key_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["hostname"]
        indexes = [
            models.Index(fields=["status"]),
            models.Index(fields=["gpu_vendor"]),
            models.Index(fields=["node_key_hash"]),
            models.Index(fields=["health_state"]),
            models.Index(fields=["health_action"]),
            models.Index(fields=["slurm_hold"]),
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


class GpuHealth(models.Model):
    """One GPU of a node as its exporter last judged it: the verdict and its evidence.

    Written by the sweep when a node's verdict answer changes (inventory.services.health);
    kept across re-registrations, removed with the node. ``evidence`` is a list of
    contract.verdicts.Evidence dicts, the worst first.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveIntegerField()
    uuid = models.CharField(max_length=128, blank=True, default="")
    serial = models.CharField(max_length=64, blank=True, default="")
    # The minor number of its device file (/dev/nvidia<minor>), empty where the exporter
    # does not say (AMD, an agent before it): job attribution maps Slurm's GPU index, which
    # counts the device files in this order, to `index` (NVML's, by PCI bus) with it.
    minor = models.PositiveIntegerField(null=True, blank=True)
    vendor = models.CharField(max_length=16, choices=GpuVendor.choices, default=GpuVendor.NONE)
    state = models.CharField(
        max_length=16, choices=HealthState.choices, default=HealthState.HEALTHY
    )
    action = models.CharField(
        max_length=24, choices=HealthAction.choices, default=HealthAction.NONE
    )
    evidence = models.JSONField(default=list, blank=True)
    since = models.DateTimeField(default=timezone.now)
    updated = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="one_row_per_gpu")]
        verbose_name = "GPU health"
        verbose_name_plural = "GPU health"

    def __str__(self) -> str:
        return f"{self.node_id}/GPU {self.index}: {self.state}"


class GpuFault(models.Model):
    """A fault of one GPU in one boot, kept by the GPU's identity (serial, else UUID).

    The history escalation counts: the same fault in more boots than MAC_GPU_FAULT_REBOOTS
    allows turns the action into inspect_hardware. Keyed by the GPU, not the node, so it
    survives the node's re-registration and even a move of the GPU to another node.
    """

    gpu = models.CharField(max_length=128)  # serial, else UUID
    fault = models.CharField(max_length=64)  # source:code, e.g. "xid:79"
    boot_id = models.CharField(max_length=64)
    node = models.ForeignKey(
        Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="gpu_faults"
    )
    hostname = models.CharField(max_length=253)
    gpu_index = models.PositiveIntegerField(default=0)
    detail = models.CharField(max_length=300, blank=True, default="")
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-last_seen"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "fault", "boot_id"], name="one_row_per_boot")
        ]
        indexes = [models.Index(fields=["gpu", "fault", "-last_seen"])]

    def __str__(self) -> str:
        return f"{self.gpu} {self.fault} in boot {self.boot_id}"
