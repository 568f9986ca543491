"""Choices for node status, reasons, diagnoses, GPU vendors and event kinds.

Every status value and reason in MAC is one of these; nothing compares bare strings.
Probe outcomes and diagnoses are the contract's values (contract.outcomes), so the
agent's `mac probe` and the master's sweep speak the same words as the database.
"""

from django.db import models

from contract import outcomes, verdicts
from contract.outcomes import OUTCOME_LABELS, Outcome
from contract.services import AgentNetwork as ContractNetwork


class NodeStatus(models.TextChoices):
    UNKNOWN = "unknown", "Unknown"  # registered, not probed yet
    ONLINE = "online", "Online"
    OFFLINE = "offline", "Offline"


class StatusReason(models.TextChoices):
    """Why the last probe of a node's sys-exporter (29101) ended as it did."""

    NONE = "", "-"
    OK = Outcome.OK.value, OUTCOME_LABELS[Outcome.OK]
    REGISTERED = "registered", "registered, waiting for the first probe"
    TIMEOUT = Outcome.TIMEOUT.value, OUTCOME_LABELS[Outcome.TIMEOUT]
    REFUSED = Outcome.REFUSED.value, OUTCOME_LABELS[Outcome.REFUSED]
    UNREACHABLE = Outcome.UNREACHABLE.value, OUTCOME_LABELS[Outcome.UNREACHABLE]
    HTTP_STATUS = Outcome.HTTP_STATUS.value, OUTCOME_LABELS[Outcome.HTTP_STATUS]
    BAD_BODY = Outcome.BAD_BODY.value, OUTCOME_LABELS[Outcome.BAD_BODY]
    ERROR = Outcome.ERROR.value, OUTCOME_LABELS[Outcome.ERROR]


# What the probes say about why a node is offline (flow 5): the contract's
# diagnoses as Django choices, member for member.
Diagnosis = models.TextChoices(
    "Diagnosis",
    [(code.name, (code.value, outcomes.DIAGNOSIS_LABELS[code])) for code in outcomes.Diagnosis],
)


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
    IP_FORWARD_RESET = "ip_forward_reset", "IPv4 forwarding reset on the node"
    # The node's GPU verdict changed (inventory.services.health): named by the new state.
    HEALTH_HEALTHY = "health_healthy", "GPUs healthy"
    HEALTH_DEGRADED = "health_degraded", "GPU degraded"
    HEALTH_UNHEALTHY = "health_unhealthy", "GPU unhealthy"
    # A GPU's fault history forgotten by a person (inventory.services.changes).
    FAULTS_FORGOTTEN = "faults_forgotten", "GPU fault history forgotten"
    # What MAC did, or chose not to do, to the node in Slurm (scheduler.drainpass).
    SLURM_DRAIN = "slurm_drain", "Drained in Slurm"
    SLURM_REBOOT = "slurm_reboot", "Reboot asked of Slurm"
    SLURM_REASON = "slurm_reason", "Drain reason updated in Slurm"
    SLURM_RESUME = "slurm_resume", "Resumed in Slurm"
    SLURM_NOT_DRAINED = "slurm_not_drained", "Not drained in Slurm"
    SLURM_DRY_RUN = "slurm_dry_run", "Slurm dry run"


# The GPU verdict's state and suggested action: the contract's values (contract.verdicts),
# member for member, so agent, sweep and database speak the same words.
HealthState = models.TextChoices(
    "HealthState",
    [(state.name, (state.value, verdicts.STATE_LABELS[state])) for state in verdicts.HealthState],
)
HealthAction = models.TextChoices(
    "HealthAction",
    [
        (action.name, (action.value, verdicts.ACTION_LABELS[action]))
        for action in verdicts.HealthAction
    ],
)


class SlurmHold(models.TextChoices):
    """Who keeps the node out of service in Slurm, as the drain last read it."""

    NONE = "", "in service"  # or not in Slurm, or the drain is off
    MAC = "mac", "drained by MAC"  # drained or down with a reason that starts "MAC:"
    ADMIN = "admin", "drained by admin"  # drained or down with anyone else's reason


class AgentNetwork(models.TextChoices):
    """The agent's network mode as it registered (contract.services.AgentNetwork)."""

    UNKNOWN = "", "unknown"  # an agent older than the mode
    HOST = ContractNetwork.HOST.value, "host network"
    BRIDGE = ContractNetwork.BRIDGE.value, "bridge (published ports)"
