"""Choices for node status, reasons, diagnoses, GPU vendors and event kinds.

Every status value and reason in MAC is one of these; nothing compares bare strings.
"""

from django.db import models


class NodeStatus(models.TextChoices):
    UNKNOWN = "unknown", "Unknown"  # registered, not probed yet
    ONLINE = "online", "Online"
    OFFLINE = "offline", "Offline"


class StatusReason(models.TextChoices):
    """Why the last probe of a node's sys-exporter (29101) ended as it did."""

    NONE = "", "-"
    OK = "ok", "sys-exporter answered"
    REGISTERED = "registered", "registered, waiting for the first probe"
    TIMEOUT = "timeout", "sys-exporter timed out"
    REFUSED = "refused", "connection refused"
    UNREACHABLE = "unreachable", "host unreachable"
    HTTP_STATUS = "http_status", "unexpected HTTP status"
    BAD_BODY = "bad_body", "not a Prometheus exposition"
    ERROR = "error", "probe error"


class Diagnosis(models.TextChoices):
    """What the probes say about why a node is offline (flow 5 of the contract)."""

    NONE = "", "-"
    IP_FORWARD_OFF = "ip_forward_off", "IPv4 forwarding is off on the agent"
    SERVICE_DOWN = "service_down", "the exporter service is down"
    HOST_DOWN = "host_down", "host down or network cut"
    EXPORTER_BROKEN = "exporter_broken", "the exporter answers but is broken"


class GpuVendor(models.TextChoices):
    NONE = "none", "None"
    NVIDIA = "nvidia", "NVIDIA"
    AMD = "amd", "AMD"


class EventKind(models.TextChoices):
    REGISTERED = "registered", "Registered"
    REREGISTERED = "reregistered", "Re-registered"
    IP_CHANGED = "ip_changed", "IP changed"
    HOSTNAME_CHANGED = "hostname_changed", "Hostname changed"
    ONLINE = "online", "Online"
    OFFLINE = "offline", "Offline"
    DEREGISTERED = "deregistered", "Deregistered"
    EDITED = "edited", "Edited by an admin"
    MAINTENANCE_ON = "maintenance_on", "Maintenance on"
    MAINTENANCE_OFF = "maintenance_off", "Maintenance off"
    KEY_RESET = "key_reset", "Node key reset"
