"""What the drain remembers of each node between passes (scheduler.drainpass).

Slurm itself keeps which nodes MAC drained (their reason starts with ``MAC:``); what it
cannot keep is what MAC last *decided* about a node, the reason it last wrote, what its
drain waits for, and the boot it asked Slurm to reboot. The decision lets a refusal
(budget, someone else's drain, an unknown name, a resume that waits for a reboot) or a
dry-run decision reach the node's history once, not every sweep; the reason written
tells MAC's own words from someone's edit of them, which MAC then leaves alone pass
after pass; the drain's action and boot keep MAC from resuming a node whose repair
never happened; the boot asked to reboot keeps MAC from rebooting it twice.

The jobs (`Job`, `JobGpu`) are what job attribution (scheduler.jobread) keeps of
Slurm's allocations: which job held which GPU of which node, from when to when.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from contract.verdicts import HealthAction
from inventory.models import Node
from scheduler.drain import Decision


class DrainRecord(models.Model):
    """The drain's last recorded decision about one node, and its last reboot request."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="drain_record")
    decision = models.CharField(
        max_length=16,
        choices=[(decision.value, decision.value) for decision in Decision],
        blank=True,
        default="",
    )
    dry_run = models.BooleanField(default=False)
    reason = models.CharField(max_length=500, blank=True, default="")
    decided_at = models.DateTimeField(default=timezone.now)
    # The reason MAC itself last wrote into Slurm (a drain, a reboot, a newer reason),
    # kept while MAC holds the node, whatever it decided since: a later refusal (someone
    # added to that reason) must not make MAC forget which words were its own. Forgotten
    # once the node is out of MAC's hands (resumed by MAC, by a person or by Slurm after
    # a reboot, or drained anew by someone else).
    wrote = models.CharField(max_length=500, blank=True, default="")
    # While MAC holds the node: the worst action it drained for (an escalation while
    # drained raises it; "" where not known, a drain from before MAC kept it), and the
    # boot (Node.boot_id) its fault was last seen on ("" where not known). A drain for an
    # operator's repair resumes only on a later boot (scheduler.drain).
    drained_action = models.CharField(
        max_length=16,
        choices=[(action.value, action.value) for action in HealthAction],
        blank=True,
        default="",
    )
    drained_boot = models.CharField(max_length=64, blank=True, default="")
    # The boot (Node.boot_id; "?" when the agent reports none) MAC asked Slurm to reboot.
    rebooted_boot = models.CharField(max_length=64, blank=True, default="")
    rebooted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.node_id}: {self.decision or 'nothing'}"


class Job(models.Model):
    """A Slurm job MAC read from slurmctld (`squeue`) or accounting (`sacct`), kept for the
    job pages and the notifications until MAC_METRICS_RETENTION after it ended
    (scheduler.jobread writes and prunes it)."""

    job_id = models.PositiveBigIntegerField(unique=True)
    # The JobID Slurm shows people: "123_4" (an array's task), "123+1" (a component of a
    # heterogeneous job), else job_id; "" for rows read before MAC kept it.
    slurm_id = models.CharField(max_length=64, blank=True, default="")
    name = models.CharField(max_length=200, blank=True, default="")
    user = models.CharField(max_length=100, blank=True, default="")
    account = models.CharField(max_length=100, blank=True, default="")
    partition = models.CharField(max_length=100, blank=True, default="")
    state = models.CharField(max_length=32)  # Slurm's word: RUNNING, COMPLETED, FAILED, ...
    nodes = models.JSONField(default=list, blank=True)  # Slurm NodeNames
    gpu_count = models.PositiveIntegerField(default=0)
    submitted = models.DateTimeField(null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    ended = models.DateTimeField(null=True, blank=True)
    seen = models.DateTimeField(default=timezone.now)  # the last read that listed it

    class Meta:
        ordering = ["-job_id"]
        indexes = [models.Index(fields=["user", "-job_id"]), models.Index(fields=["ended"])]

    def __str__(self) -> str:
        return f"job {self.shown_id} ({self.user}, {self.state})"

    @property
    def shown_id(self) -> str:
        """The id people know the job by (Slurm's JobID)."""
        return self.slurm_id or str(self.job_id)


class JobGpu(models.Model):
    """One GPU a job held on one node, and from when to when.

    `slurm_index` is Slurm's GRES index (the order of the node's device files); `index`
    the same GPU as the exporters and GpuHealth number it (NVML's, by PCI bus), which
    every reader matches: scheduler.jobread maps one to the other from the GPUs' minor
    numbers, the identity where they are not known. `until` is empty while the job holds
    it. `node` is MAC's node of that Slurm NodeName (MAC_SLURM_NODE_MAP), empty when MAC
    does not monitor it.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="gpus")
    node = models.ForeignKey(
        Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="job_gpus"
    )
    slurm_node = models.CharField(max_length=200)
    index = models.PositiveIntegerField()
    # Empty where it is `index` (a row written by something other than the read).
    slurm_index = models.PositiveIntegerField(null=True, blank=True)
    since = models.DateTimeField()
    until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "slurm_node", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "slurm_node", "slurm_index"], name="one_row_per_job_slurm_gpu"
            )
        ]
        indexes = [models.Index(fields=["node", "index", "until"])]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.slurm_node} GPU {self.index}"
