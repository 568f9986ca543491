"""Job attribution: which Slurm job holds which GPU of which node, read centrally from Slurm.

One read (`read_jobs`, run by the task scheduler.tasks.read_slurm_jobs every
MAC_PROBE_INTERVAL whenever slurm.conf exists, whatever MAC_SLURM_DRAIN says):

1. `squeue --json`: every job slurmctld remembers; a running one with each node's GRES
   indexes (`gres_detail`), which are the same for NVIDIA and AMD: Slurm's count of the
   node's device files, mapped to the exporters' GPU index (`gpu_order`);
2. `sacct` since the last read (where the cluster has slurmdbd): jobs that started and
   ended between two reads, even once slurmctld forgot them (MinJobAge);
3. the database: a `Job` per job that started and holds GPUs or runs on a node MAC
   monitors, a `JobGpu` per GPU index it held, open (`until` empty) while squeue says it
   holds it, closed at its end (or, when no source lists it any more, at the last read
   that did). A job Slurm changed nothing of since the last read only has `seen` moved.

The readers of what jobs hold now (`held_gpu_rows`, `current_jobs`, `jobs_on_gpu`) leave
out an open row whose job no read has listed for STALE_READS reads: reads that stopped
(slurmctld unreachable) close nothing.

A job never seen running has its nodes and GPU count, not its indexes: neither squeue
after the end nor sacct keeps them. Jobs are pruned MAC_METRICS_RETENTION after they
ended, as the metrics they are joined with. docs/jobs.md says why central reading.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.db import models, transaction
from django.db.models import OuterRef, Q, Subquery
from django.db.models.functions import Greatest
from django.utils import timezone

from contract.verdicts import slurm_gpu_order
from inventory.models import GpuHealth, Node
from scheduler.config import NodeNameMap
from scheduler.models import Job, JobGpu
from scheduler.slurm import SlurmClient, SlurmError, SlurmJob

log = logging.getLogger(__name__)

# The last read whose sacct answered: the next sacct window starts there.
LAST_READ_KEY = "scheduler:jobs:last-read"
# sacct's window reaches back past the last read by this much: clocks of the master and
# slurmdbd differ a little, and a job's record lands a fraction of a second after its end.
SACCT_OVERLAP = timedelta(seconds=60)
# The first read (or one after a long outage) asks sacct no further back than this.
SACCT_FIRST_WINDOW = timedelta(hours=1)
# A job row whose id Slurm gave to another job keeps its history under its id with its
# row id above Slurm's 32-bit job ids (`_retire_reused_ids`).
RETIRED_SHIFT = 32
# An open GPU row counts as held now only while a read listed its job within this many
# read intervals: when reads stop (slurmctld or munge down, no worker) nothing closes the
# rows, and the metrics, the node page and the GPU alerts must not go on naming jobs that
# may have ended. Several, so that a read skipped now and then (a slow one holding the lock,
# a busy worker) is not taken for an outage; never under STALE_FLOOR, the longest a read
# may hold its lock (scheduler.tasks.LOCK_SECONDS).
STALE_READS = 5
STALE_FLOOR = timedelta(seconds=120)
# What a read writes of a job: each but `seen` is rewritten only where Slurm changed it.
COMPARED_FIELDS = (
    "slurm_id", "name", "user", "account", "partition", "state", "nodes", "gpu_count", "submitted",
    "started", "ended",
)  # fmt: skip
JOB_FIELDS = (*COMPARED_FIELDS, "seen")


@dataclass
class ReadResult:
    """What one read saw and changed."""

    jobs: int = 0  # jobs recorded (seen running or finished, with GPUs or on MAC's nodes)
    opened: int = 0  # GPU allocations that began
    closed: int = 0  # GPU allocations that ended
    pruned: int = 0  # jobs older than the retention, removed
    accounting: bool = False  # sacct answered
    errors: list[str] = field(default_factory=list)


def read_jobs(client: SlurmClient, now: datetime | None = None) -> ReadResult:
    """Read Slurm once and bring the database's jobs and GPU allocations up to date."""
    now = now or timezone.now()
    result = ReadResult()
    try:
        names = NodeNameMap.from_settings()
    except ImproperlyConfigured as exc:
        # Nothing is written without it (a job would lose its node until the map reads
        # again); /health says why (scheduler.health).
        log.warning("job attribution: Slurm not read: %s", exc)
        result.errors.append(str(exc))
        return result
    # A controller that is down makes squeue retry for ~9 s; its ping answers within 2 s.
    client.ping()
    live = client.jobs()  # SlurmError propagates: nothing to record without slurmctld
    accounted: list[SlurmJob] = []
    last = cache.get(LAST_READ_KEY)
    since = now - SACCT_FIRST_WINDOW
    if last:
        since = max(last - SACCT_OVERLAP, since)
    try:
        accounted = client.accounting_jobs(since)
        result.accounting = True
    except SlurmError as exc:  # no slurmdbd on this cluster, or it is down: squeue alone
        result.errors.append(f"sacct: {exc}")
    record(live, accounted, now, result, names)
    result.pruned = prune(now)
    if result.accounting:
        # Only a window sacct answered for is done: after slurmdbd's outage the next one
        # reaches back to it (up to SACCT_FIRST_WINDOW), for the jobs slurmctld
        # replayed to it meanwhile and has forgotten since.
        cache.set(LAST_READ_KEY, now, None)
    return result


def merge(live: list[SlurmJob], accounted: list[SlurmJob]) -> dict[int, SlurmJob]:
    """One record per job that started: slurmctld's (it has the indexes) over sacct's.

    sacct's unfinished jobs count only where squeue lists them too: squeue lists every
    job that runs, so one only slurmdbd thinks runs is a runaway record of a job gone
    (or one that started between the two calls, which the next read has).
    """
    listed = {job.job_id for job in live}
    jobs = {
        job.job_id: job
        for job in accounted
        if job.started and (job.finished or job.job_id in listed)
    }
    jobs.update({job.job_id: job for job in live if job.started})
    return jobs


def held_gpus(jobs: dict[int, SlurmJob]) -> set[tuple[int, str, int]]:
    """(job id, NodeName, Slurm's GPU index) of every GPU that a job holds now."""
    return {
        (job.job_id, allocation.node, index)
        for job in jobs.values()
        if job.holds_gpus
        for allocation in job.gpus
        for index in allocation.indexes
    }


@transaction.atomic
def record(
    live: list[SlurmJob],
    accounted: list[SlurmJob],
    now: datetime,
    result: ReadResult,
    names: NodeNameMap | None = None,
) -> None:
    """Write the jobs and open or close their GPU allocations (`names`: MAC_SLURM_NODE_MAP
    as read for this read, else now)."""
    listed = merge(live, accounted)
    node_of = _node_ids(
        {name for job in listed.values() for name in _slurm_nodes(job)},
        names or NodeNameMap.from_settings(),
    )
    jobs = {job_id: job for job_id, job in listed.items() if _kept(job, node_of)}
    stored = _stored(jobs)
    _retire_reused_ids(jobs, stored)
    result.jobs = _write_jobs(jobs, stored, now)
    held = held_gpus(jobs)  # by Slurm's index
    open_rows = {
        _key(row): row for row in JobGpu.objects.filter(until__isnull=True).select_related("job")
    }
    order = gpu_order({node_of[name] for _, name, _ in held if name in node_of})

    def gpu_of(name: str, slurm_index: int) -> tuple[int | None, int]:
        node = node_of.get(name)
        return node, _exporter_index(order.get(node), slurm_index)

    # Held still, on a node MAC enrolled (or MAC_SLURM_NODE_MAP named) since the row began,
    # or whose GPUs' minors the inventory learnt since: the row follows.
    moved = [
        row
        for key, row in open_rows.items()
        if key in held and (row.node_id, row.index) != gpu_of(row.slurm_node, key[2])
    ]
    for row in moved:
        row.slurm_index = _key(row)[2]
        row.node_id, row.index = gpu_of(row.slurm_node, row.slurm_index)
    JobGpu.objects.bulk_update(moved, ["node", "index", "slurm_index"], batch_size=500)
    # Ended: no longer held by a job slurmctld or sacct still lists (its end, else this
    # read), or by a job neither lists any more: then when a read last listed it, as its
    # Job.ended below, so that it does not overlap the next job on that GPU.
    closing = []
    for key, row in open_rows.items():
        if key in held:
            continue
        job = jobs.get(key[0])
        if job is None:
            row.until = max(row.since, row.job.seen)
        else:
            row.until = job.ended or now
        closing.append(row)
    JobGpu.objects.bulk_update(closing, ["until"], batch_size=500)
    result.closed = len(closing)
    # A job neither source lists any more, whose end MAC missed (no slurmdbd, and the master
    # away for longer than MinJobAge): ended when last seen, so the retention prunes it.
    # Listed, even where not kept: a CPU-only job recorded before MAC left those out ends
    # when it does. (Every job kept was written `seen=now` above: the rest is a short list.)
    unseen = Job.objects.filter(ended__isnull=True, started__isnull=False).exclude(seen=now)
    gone = set(unseen.values_list("job_id", flat=True)) - listed.keys()
    Job.objects.filter(job_id__in=gone).update(ended=models.F("seen"))
    # Held again after a read closed it (a requeued job back on the same GPU, or a read
    # that missed it): the one row per job and GPU opens again, from the job's latest start.
    # (A job held now was written `seen=now` above.)
    closed = {
        _key(row): row
        for row in JobGpu.objects.filter(job__seen=now, until__isnull=False).select_related("job")
    }
    reopening = [closed[key] for key in sorted(held & closed.keys())]
    for row in reopening:
        row.until = None
        row.since = jobs[row.job.job_id].started or row.since
        row.slurm_index = _key(row)[2]
        row.node_id, row.index = gpu_of(row.slurm_node, row.slurm_index)
    JobGpu.objects.bulk_update(
        reopening, ["until", "since", "node", "index", "slurm_index"], batch_size=500
    )
    # Begun: held now, with no row yet.
    begun = sorted(held - open_rows.keys() - closed.keys())
    ids = dict(Job.objects.filter(job_id__in={key[0] for key in begun}).values_list("job_id", "id"))
    opening = [
        JobGpu(
            job_id=ids[job_id], node_id=gpu_of(name, index)[0], slurm_node=name,
            index=gpu_of(name, index)[1], slurm_index=index, since=jobs[job_id].started or now,
        )
        for job_id, name, index in begun
    ]  # fmt: skip
    JobGpu.objects.bulk_create(opening, batch_size=500)
    result.opened = len(opening) + len(reopening)


def _key(row: JobGpu) -> tuple[int, str, int]:
    """(job id, NodeName, Slurm's GPU index): a row as `held_gpus` names what it holds."""
    slurm_index = row.index if row.slurm_index is None else row.slurm_index
    return (row.job.job_id, row.slurm_node, slurm_index)


def gpu_order(node_ids: set[int]) -> dict[int, list[int]]:
    """For each of these nodes whose every GPU's minor number the inventory knows: its GPUs'
    indexes as the exporters number them, in Slurm's order (contract.verdicts.slurm_gpu_order:
    Slurm's GPU k is the one with the k-th smallest minor; NVML numbers by PCI bus, and the
    two differ on real nodes). A node left out keeps Slurm's index as the exporters'."""
    minors: dict[int, dict[int, int | None]] = defaultdict(dict)
    rows = GpuHealth.objects.filter(node_id__in=node_ids).values_list("node_id", "index", "minor")
    for node_id, index, minor in rows:
        minors[node_id][index] = minor
    found = {node_id: slurm_gpu_order(by_index) for node_id, by_index in minors.items()}
    return {node_id: order for node_id, order in found.items() if order is not None}


def _exporter_index(order: list[int] | None, slurm_index: int) -> int:
    """The exporters' index of Slurm's GPU `slurm_index` (`gpu_order`); Slurm's own where
    the order is unknown or holds no such GPU."""
    if order and slurm_index < len(order):
        return order[slurm_index]
    return slurm_index


def _slurm_nodes(job: SlurmJob) -> set[str]:
    """The NodeNames a job runs on, and those it holds GPUs of (the same, as Slurm says)."""
    return {*job.nodes, *(allocation.node for allocation in job.gpus)}


def _kept(job: SlurmJob, node_of: dict[str, int]) -> bool:
    """Whether MAC records the job: it holds GPUs, or runs on a node MAC monitors. Every
    reader of jobs (the GPU rows, the job page's GPUs and faults, the alerts) is about
    GPUs or MAC's nodes; a CPU partition's thousands of jobs beside them are not. Measured
    (record() with 20,000 running jobs, 2,000 of them on GPUs): 3.1 to 3.3 s a read
    keeping them all, 0.2 to 0.3 s keeping these (unchanged: `seen` moved only)."""
    return bool(job.gpu_count or job.gpus) or any(name in node_of for name in job.nodes)


def _stored(jobs: dict[int, SlurmJob]) -> dict[int, dict]:
    """The database's rows of these jobs (id, and what a read writes but `seen`), by job id."""
    rows = Job.objects.filter(job_id__in=jobs).values("id", "job_id", *COMPARED_FIELDS)
    return {row["job_id"]: row for row in rows.iterator(chunk_size=2000)}


def _write_jobs(jobs: dict[int, SlurmJob], stored: dict[int, dict], now: datetime) -> int:
    """Insert the jobs new to the database and rewrite those Slurm changed; the others only
    get `seen` moved, in one statement (a running job is listed at every read). Returns how
    many jobs there are.

    Measured (record() with 20,000 running GPU jobs, PostgreSQL, two shared cores): 4.4 to
    5.3 s a read rewriting every row, 3.0 s moving only `seen`."""
    rows = [_job_row(job, now) for job in jobs.values()]
    changed = [row for row in rows if not _same(stored.get(row.job_id), row)]
    Job.objects.bulk_create(
        changed,
        update_conflicts=True,
        unique_fields=["job_id"],
        update_fields=list(JOB_FIELDS),
        batch_size=1000,
    )
    written = {row.job_id for row in changed}
    unchanged = [job_id for job_id in stored if job_id not in written]
    Job.objects.filter(job_id__in=unchanged).update(seen=now)
    return len(rows)


def _same(row: dict | None, job: Job) -> bool:
    return row is not None and all(row[name] == getattr(job, name) for name in COMPARED_FIELDS)


def _retire_reused_ids(jobs: dict[int, SlurmJob], stored: dict[int, dict]) -> int:
    """Move the rows of earlier jobs whose id Slurm gave again (its state wiped, or its ids
    wrapped at MaxJobId) out of the new job's way, with their GPUs: the new job would
    otherwise take over their history, and a past fault on their GPUs would name it.
    `stored` (the rows of `jobs`, _stored) loses them: the new job's row is new.

    Another job started at another time, by another user or under another name. A
    requeue keeps its user and name (and gets a new submit time, so that tells nothing);
    a job renamed while it runs (`scontrol update JobName=`), or one whose user squeue
    could give only as a uid, keeps its start."""
    retired = []
    for job_id, row in list(stored.items()):
        if not _another_job(row, jobs[job_id]):
            continue
        log.info("Slurm gave job id %d again: the earlier job's row is kept apart", job_id)
        retired.append(
            Job(
                id=row["id"],
                job_id=job_id | (row["id"] << RETIRED_SHIFT),
                slurm_id=row["slurm_id"] or str(job_id),  # still shown as people knew it
            )
        )
        del stored[job_id]
    Job.objects.bulk_update(retired, ["job_id", "slurm_id"], batch_size=500)
    return len(retired)


def _another_job(row: dict, job: SlurmJob) -> bool:
    def differ(kept: str, read: str, limit: int) -> bool:
        return bool(kept and read and kept != read[:limit])

    started = row["started"]
    restarted = bool(started and job.started and started != job.started)
    return restarted and (differ(row["user"], job.user, 100) or differ(row["name"], job.name, 200))


def _node_ids(slurm_names: set[str], names: NodeNameMap) -> dict[str, int]:
    """MAC's node id of each of these Slurm NodeNames it monitors (`names`: the map of
    MAC_SLURM_NODE_MAP, else the short host name): one pass over the inventory, whatever
    the number of jobs.

    A NodeName two MAC hosts map to (short names alike in two domains, a typo in the map)
    is left out, as the drain leaves it: its jobs would otherwise go to either host."""
    hosts: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for hostname, node_id in Node.objects.values_list("hostname", "id"):
        name = names.to_slurm(hostname)
        if name in slurm_names:
            hosts[name].append((hostname, node_id))
    found: dict[str, int] = {}
    for name, pairs in hosts.items():
        if len(pairs) == 1:
            found[name] = pairs[0][1]
            continue
        shared = (name, tuple(sorted(hostname for hostname, _ in pairs)))
        if shared not in _SAID_SHARED:  # once per worker, not at every read
            _SAID_SHARED.add(shared)
            log.warning(
                "Job attribution: MAC's hosts %s all name Slurm's %s; its jobs are shown on "
                "none of them; give each its own in MAC_SLURM_NODE_MAP",
                ", ".join(shared[1]), name,
            )  # fmt: skip
    return found


_SAID_SHARED: set[tuple[str, tuple[str, ...]]] = set()


def _job_row(job: SlurmJob, now: datetime) -> Job:
    return Job(
        job_id=job.job_id, slurm_id=(job.slurm_id or str(job.job_id))[:64],
        name=job.name[:200], user=job.user[:100], account=job.account[:100],
        partition=job.partition[:100], state=job.state[:32], nodes=list(job.nodes),
        gpu_count=job.gpu_count, submitted=job.submitted, started=job.started, ended=job.ended,
        seen=now,
    )  # fmt: skip


def close_all() -> int:
    """Close every open GPU row at its job's last read, where attribution is switched off
    (no slurm.conf any more): no read will ever close them. Returns how many."""
    last_read = Subquery(Job.objects.filter(pk=OuterRef("job_id")).values("seen")[:1])
    return JobGpu.objects.filter(until__isnull=True).update(
        until=Greatest(models.F("since"), last_read)
    )


def prune(now: datetime) -> int:
    """Remove jobs that ended longer ago than the metrics are kept (MAC_METRICS_RETENTION)."""
    cutoff = now - timedelta(seconds=settings.METRICS_RETENTION_SECONDS)
    deleted, _ = Job.objects.filter(ended__lt=cutoff).delete()
    return deleted


# ---------------------------------------------------------------- reading what was recorded


def stale_after() -> timedelta:
    """How long after the last read that listed a job its open GPU rows still count."""
    return max(timedelta(seconds=STALE_READS * settings.PROBE_INTERVAL), STALE_FLOOR)


def _held_now() -> Q:
    """Open rows whose job a read listed lately (STALE_READS)."""
    return Q(until__isnull=True, job__seen__gte=timezone.now() - stale_after())


def jobs_on_gpu(node_id: int, index: int, at: datetime) -> list[Job]:
    """The jobs that held GPU `index` (the exporters' index) of MAC's node `node_id` at the
    moment `at`; a row still open counts up to STALE_READS read intervals after a read last
    listed its job."""
    held = JobGpu.objects.filter(node_id=node_id, index=index, since__lte=at).filter(
        Q(until__gte=at) | Q(until__isnull=True, job__seen__gte=at - stale_after())
    )
    return list(Job.objects.filter(gpus__in=held).distinct().order_by("job_id"))


def current_jobs(node_ids: list[int] | None = None) -> dict[tuple[int, int], JobGpu]:
    """{(node id, GPU index): its open allocation, with the job} for the nodes (default all),
    leaving out jobs no read has listed lately (STALE_READS)."""
    rows = JobGpu.objects.filter(_held_now(), node__isnull=False).select_related("job", "node")
    if node_ids is not None:
        rows = rows.filter(node_id__in=node_ids)
    return {(row.node_id, row.index): row for row in rows.order_by("since")}


def job_words(job: Job) -> str:
    """ "job 4242 (alice)", "job 4242_7 (alice)": how a notification names a job."""
    return f"job {job.shown_id} ({job.user or 'unknown user'})"


def alert_jobs(sender: object = None, rows: list[dict] = (), **kwargs) -> dict:
    """The GPU alerts' answer (alerting.gpualerts.gpu_jobs): for each faulty GPU, the jobs
    that held it when the fault happened, in words."""
    return {
        (row["node"], row["gpu"]): ", ".join(
            job_words(job) for job in jobs_on_gpu(row["node"], row["gpu"], row["fault_at"])
        )
        for row in rows
    }


def held_gpu_rows():
    """(node id, GPU index, hostname, job id, user, partition) of every GPU held now, on
    nodes MAC monitors, in node and index order (jobs a read listed lately: STALE_READS)."""
    return (
        JobGpu.objects.filter(_held_now(), node__isnull=False)
        .order_by("node_id", "index", "job__job_id")
        .values_list(
            "node_id", "index", "node__hostname", "job__job_id", "job__user", "job__partition"
        )
    )
