"""One fleet sweep: single steps that tests can call one by one, and the one pipeline.

    probe_and_save:  load_nodes -> probe_nodes -> judge -> save_fenced
    publish:         load_targets -> write_targets_for -> push_pending
                     -> queue_node_alerts -> queue_drain_pass -> record

Both paths of a sweep run exactly these two functions. run_sweep runs them one after
the other in one process over every node; a sharded sweep (healthcheck.chunks) runs
probe_and_save once per id range, in chunk tasks on any workers, and publish once in
its chord's callback. Nothing of a sweep is composed anywhere else.

Only `probe_nodes` touches the network (through contract.liveness, plain
asyncio); the rest reads and writes the inventory. The same probes bring the GPU
verdicts back (the liveness GET of a GPU exporter asks for them: healthcheck.verdicts);
`judge` hands them to inventory.services.health and the write saves what it decided,
in the same fenced transaction. The step functions take and
return plain values so a test can feed `judge` hand-made probe results, or run
the probe somewhere else (inside a network namespace) and bring the results back.
The write is fenced (healthcheck.fence): a sweep that lost its lock commits nothing.

Costs at 10,000 nodes were designed for: nodes are loaded with `.values()` and
only the columns the dashboard shows (inventory.models.SUMMARY_FIELDS) and the probe
needs; only nodes whose status, reason, detail, diagnosis or
exporter health changed are written (one UPDATE per group of identical new
values), with one NodeEvent per status change (bulk_create); `last_seen` of
every node that answered is set with one `UPDATE ... WHERE id IN (...)` per
5,000 ids; the targets files are
rewritten only when their content changes; and the dashboard gets one message
carrying all the changes.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from alerting.tasks import queue_node_alerts
from contract.diagnosis import describe, diagnose
from contract.liveness import NodeProbe, ProbeStats, Target, run_probe
from healthcheck.fence import Fence
from healthcheck.state import PENDING_KEY, SweepStats, get_redis, record_sweep
from healthcheck.verdicts import observe
from inventory.choices import EventKind, NodeStatus, StatusReason
from inventory.live import broadcast_node_changes
from inventory.models import SUMMARY_FIELDS, Node, NodeEvent
from inventory.services.contention import atomic_again
from inventory.services.health import HealthChanges, drop_overtaken, judge_health, save_health
from scheduler.tasks import queue_drain_pass
from scraping.targets import TARGET_FIELDS, write_targets

log = logging.getLogger(__name__)

# What the dashboard shows of a node (Node.summary()), the exporters it probes, and the
# fingerprint of its last GPU verdict answers.
NODE_FIELDS = (*SUMMARY_FIELDS, "exporters", "health_digest")
WRITE_BATCH = 1000
ID_CHUNK = 5000  # ids per `WHERE id IN (...)`, well under SQLite's 32,766 parameters

ProbeFunction = Callable[[list[Target]], list[NodeProbe]]


@dataclass
class Judgement:
    """What one sweep decided: rows to write, events to add, nodes that answered."""

    # Rows with their new values, plus "status_changed" (bool).
    changed: list[dict] = field(default_factory=list)
    events: list[NodeEvent] = field(default_factory=list)
    seen_ids: list[int] = field(default_factory=list)
    health: HealthChanges = field(default_factory=HealthChanges)  # the GPU verdicts

    @property
    def changed_ids(self) -> list[int]:
        """Every node whose row the dashboards must see again (status or verdict)."""
        return sorted({row["id"] for row in self.changed} | set(self.health.written_ids))


def load_nodes(id_range: tuple[int, int] | None = None) -> list[dict]:
    """Every node (or those with lo <= id <= hi), only the columns a sweep needs, as dicts."""
    nodes = Node.objects.order_by()
    if id_range is not None:
        nodes = nodes.filter(id__gte=id_range[0], id__lte=id_range[1])
    return list(nodes.values(*NODE_FIELDS))


def load_targets() -> list[dict]:
    """Every node as it is now, only the columns of its targets and of the counts."""
    return list(Node.objects.order_by().values(*TARGET_FIELDS))


def targets_for(rows: Iterable[dict]) -> list[Target]:
    """Probe targets, nodes not known to be Online first.

    A node that was Offline will probably time out again; starting those
    first lets their timeouts run while the live nodes answer, instead of
    adding a full timeout at the end of the sweep. Online nodes are marked
    `confirm`: a failure is probed again before it takes them Offline.
    """
    ordered = sorted(rows, key=lambda row: row["status"] == NodeStatus.ONLINE)
    return [
        Target(
            row["id"],
            row["ip"],
            tuple(row["exporters"] or ()),
            confirm=row["status"] == NodeStatus.ONLINE,
        )
        for row in ordered
    ]


def probe_nodes(
    rows: list[dict], probe: ProbeFunction | None = None, stats: ProbeStats | None = None
) -> dict[int, NodeProbe]:
    """Run the probe over the rows' targets; results by node id."""
    targets = targets_for(rows)
    if probe is None:
        results = run_probe(
            targets,
            timeout=settings.PROBE_TIMEOUT,
            concurrency=settings.PROBE_CONCURRENCY,
            stats=stats,
        )
    else:
        results = probe(targets)
    return {result.node_id: result for result in results}


def _event_message(row: dict, reason_label: str) -> str:
    status = NodeStatus(row["status"]).label
    message = f"{status}: {reason_label}"
    if row["status_detail"]:
        message += f" ({row['status_detail']})"
    if row["diagnosis"]:
        message += f". {describe(row['diagnosis'])[0]}"
    if row["maintenance"]:
        message = "[maintenance] " + message
    return message[:500]


def judge(rows: list[dict], probes: dict[int, NodeProbe], now: datetime) -> Judgement:
    """Compare every node with its probe results; nothing is written here."""
    result = Judgement()
    observations = {row["id"]: observe(row, probes.get(row["id"])) for row in rows}
    result.health = judge_health(rows, observations, now)
    for row in rows:
        probe = probes.get(row["id"])
        if probe is None:  # registered after the probe started: next sweep
            continue
        answered = probe.sys.ok
        new = {
            "status": NodeStatus.ONLINE if answered else NodeStatus.OFFLINE,
            "status_reason": StatusReason(probe.sys.outcome.value),
            "status_detail": "" if answered else probe.sys.detail,
            "diagnosis": diagnose(probe, row.get("agent_network", "")),
            "exporter_health": probe.health(),
        }
        if answered:
            result.seen_ids.append(row["id"])
        status_changed = new["status"] != row["status"]
        if any(row[key] != value for key, value in new.items()):
            previous = row["status"]
            row = {**row, **new}
            result.changed.append(
                {**row, "status_changed": status_changed, "previous_status": previous}
            )
            if status_changed:
                result.events.append(
                    NodeEvent(
                        node_id=row["id"],
                        hostname=row["hostname"],
                        kind=EventKind.ONLINE if answered else EventKind.OFFLINE,
                        message=_event_message(row, StatusReason(new["status_reason"]).label),
                        data={
                            "reason": str(new["status_reason"]),
                            "detail": new["status_detail"],
                            "diagnosis": str(new["diagnosis"]),
                            "maintenance": row["maintenance"],
                            "exporter_health": new["exporter_health"],
                        },
                        actor="probe",
                        created_at=now,
                    )
                )
    return result


def _update_groups(changed: list[dict]) -> dict[tuple, list[int]]:
    """Changed rows grouped by the values they get: one UPDATE per group.

    A sweep's changes are very repetitive (thousands of nodes going Online with the
    same reason and health when a rack comes back), so grouping turns N row
    updates into a handful of `UPDATE ... WHERE id IN (...)` statements. Django's
    bulk_update builds a CASE expression per row instead: 10.8 s for 5,000
    changed nodes under cProfile, against 0.96 s for this whole save step.
    """
    groups: dict[tuple, list[int]] = defaultdict(list)
    for row in changed:
        key = (
            row["status"],
            row["status_reason"],
            row["status_detail"],
            row["diagnosis"],
            json.dumps(row["exporter_health"], sort_keys=True),
            row["status_changed"],
        )
        groups[key].append(row["id"])
    return groups


def _drop_stale(judgement: Judgement) -> None:
    """Optimistic concurrency, inside save_changes' transaction.

    The rows were judged as they were when loaded, seconds ago; by now another writer
    may have come between:

    - a status change already applied (a retried chunk task running beside the first
      attempt, whose worker looked dead): those whose status is no longer the one judged
      from are left out, with their event: a change is written, and its event added, once;
    - a GPU verdict judged from a fingerprint the row no longer has (a fault-history
      forget, or that retried chunk): left out, and judged afresh by the next sweep
      (inventory.services.health.drop_overtaken).

    The rows about to change either way are locked, in id order, and read once; the
    sweep's other updates then lock the rest in the database's order, so a writer
    locking several of them at once can still meet it in a deadlock, which
    save_fenced runs again. Usually few change; after a fleet-wide reboot or an agent
    upgrade every GPU node's answer does, and the lock covers them all, without
    holding up the rows that point at them (FOR NO KEY UPDATE).
    """
    moving = {
        row["id"]: row["previous_status"] for row in judgement.changed if row["status_changed"]
    }
    ids = sorted(set(moving) | set(judgement.health.nodes))
    if not ids:
        return
    current: dict[int, tuple[str, str]] = {}
    for start in range(0, len(ids), ID_CHUNK):
        current.update(
            (node_id, (status, digest))
            for node_id, status, digest in Node.objects.select_for_update(no_key=True)
            .filter(id__in=ids[start : start + ID_CHUNK])
            .order_by("id")
            .values_list("id", "status", "health_digest")
        )
    stale = {node_id for node_id, old in moving.items() if current.get(node_id, ("",))[0] != old}
    if stale:
        log.info("sweep: %d status changes already applied by another writer", len(stale))
        judgement.changed = [row for row in judgement.changed if row["id"] not in stale]
        judgement.events = [event for event in judgement.events if event.node_id not in stale]
    digests = {node_id: digest for node_id, (_, digest) in current.items()}
    overtaken = drop_overtaken(judgement.health, digests)
    if overtaken:
        log.info("sweep: %d GPU verdicts judged from a changed row; next sweep", len(overtaken))


def save_changes(judgement: Judgement, now: datetime) -> None:
    """Write changed rows, their events and last_seen, in one transaction.

    Status changes that another writer applied first are dropped from the judgement
    (see _drop_stale), so afterwards it says what this call wrote.
    """
    with transaction.atomic():
        _drop_stale(judgement)
        for key, ids in _update_groups(judgement.changed).items():
            status, reason, detail, diagnosis, health, status_changed = key
            values = {
                "status": status,
                "status_reason": reason,
                "status_detail": detail,
                "diagnosis": diagnosis,
                "exporter_health": json.loads(health),
            }
            if status_changed:
                values["status_changed_at"] = now
            for start in range(0, len(ids), ID_CHUNK):
                Node.objects.filter(id__in=ids[start : start + ID_CHUNK]).update(**values)
        if judgement.events:
            # A node deregistered while we probed has no row to point at any more.
            ids = [event.node_id for event in judgement.events]
            alive = set(Node.objects.filter(id__in=ids).values_list("id", flat=True))
            events = [event for event in judgement.events if event.node_id in alive]
            NodeEvent.objects.bulk_create(events, batch_size=WRITE_BATCH)
        # Nodes that answered get last_seen; those whose GPU verdict was read and stayed
        # the same also a longer streak, in the same statement (the usual sweep: one
        # UPDATE per 5,000 nodes, as before the verdicts).
        streak = set(judgement.health.streak_ids)
        seen = [node_id for node_id in judgement.seen_ids if node_id not in streak]
        both = [node_id for node_id in judgement.seen_ids if node_id in streak]
        for ids, values in (
            (seen, {"last_seen": now}),
            (both, {"last_seen": now, "health_streak": F("health_streak") + 1}),
            (sorted(streak - set(both)), {"health_streak": F("health_streak") + 1}),
        ):
            for start in range(0, len(ids), ID_CHUNK):
                Node.objects.filter(id__in=ids[start : start + ID_CHUNK]).update(**values)
        save_health(judgement.health, now)


def write_targets_for(rows: Iterable[dict], sd_dir: Path | None = None) -> list[str]:
    """The file-SD targets of every node (sys-exporter while Online, each other exporter
    while its own probe answers: scraping.targets), and in scale-out mode each scraper's
    share; returns the files rewritten."""
    return write_targets(
        rows,
        Path(sd_dir or settings.SD_DIR),
        cluster_name=settings.CLUSTER_NAME,
        shards=settings.SCRAPE_SHARDS,  # scale-out's scrapers read their shares
    )


def write_targets_step(rows: Iterable[dict], stats: SweepStats, sd_dir: Path | None) -> None:
    """write_targets_for, with a write failure kept in the statistics instead of raised.

    A full or read-only disk costs Prometheus its update, never the dashboard push or
    the statistics: /health then names the disk, not the worker and beat.
    """
    try:
        stats.targets_rewritten = write_targets_for(rows, sd_dir)
    except OSError as exc:
        where = Path(sd_dir or settings.SD_DIR)
        stats.targets_error = f"cannot write {where}: {exc.strerror or exc}"
        log.error("sweep: %s", stats.targets_error)


def push_pending(client: redis.Redis | None = None) -> int:
    """Push every node a sweep changed and no finished sweep has pushed yet; then forget them.

    Pending ids are added inside the write's transaction (save_fenced), so a sweep that
    dies between its commit and its push (a worker killed, a chord whose other chunks
    were lost) leaves them for the next sweep that finishes: each change is pushed at
    least once. Redis away: logged, and the ids wait for the next sweep.
    """
    client = client or get_redis()
    try:
        ids = sorted(int(raw) for raw in client.smembers(PENDING_KEY))
        if ids:
            broadcast_nodes(ids)
            client.srem(PENDING_KEY, *ids)
    except redis.RedisError:
        log.warning("could not push the sweep's changes; the next sweep will", exc_info=True)
        return 0
    return len(ids)


def broadcast_nodes(ids: list[int]) -> None:
    """One message with Node.summary() of each of these nodes, as saved now."""
    if not ids:
        return
    nodes = []
    for start in range(0, len(ids), ID_CHUNK):
        nodes.extend(Node.objects.filter(id__in=ids[start : start + ID_CHUNK]))
    broadcast_node_changes([node.summary() for node in nodes])


def save_fenced(judgement: Judgement, now: datetime, fence: Fence) -> None:
    """save_changes, committed only while the sweep holds its fence (healthcheck.fence).

    The changed nodes join the pending pushes in the same transaction, after the fence
    check: a write that rolls back pushes nothing, and a commit that then fails only
    pushes unchanged nodes, which is harmless.
    """

    def save() -> None:
        save_changes(judgement, now)
        fence.check()
        changed = judgement.changed_ids
        if changed:
            get_redis().sadd(PENDING_KEY, *changed)

    # An admin's action on several of these nodes may hold one of their rows: the
    # database gives one side up, and this side runs again (inventory.services.contention).
    atomic_again(save, "the sweep's write")


def probe_and_save(
    fence: Fence,
    id_range: tuple[int, int] | None = None,
    probe: ProbeFunction | None = None,
    started_at: float | None = None,
) -> SweepStats:
    """The first half of every sweep: load -> probe -> judge -> write, fenced.

    All the nodes (run_sweep) or one id range (a chunk task). Returns the figures of
    what it probed and wrote. Raises SweepLockLost, having written nothing, when the
    sweep lost its fence.
    """
    stats = SweepStats(started_at=started_at or time.time())
    rows = load_nodes(id_range)
    probe_stats = ProbeStats()
    probes = probe_nodes(rows, probe, probe_stats)
    stats.probe_duration = time.time() - stats.started_at
    stats.confirmed = probe_stats.confirmed
    now = timezone.now()
    judgement = judge(rows, probes, now)
    save_fenced(judgement, now, fence)
    stats.nodes = len(rows)
    count_changes(stats, judgement, probes)
    return stats


def publish(
    stats: SweepStats, rows: list[dict] | None = None, sd_dir: Path | None = None
) -> SweepStats:
    """The second half of every sweep: targets files -> one push -> the node alerts'
    post (queued for a worker, alerting.nodealerts) -> the drain in Slurm (queued too,
    scheduler.drainpass; nothing while MAC_SLURM_DRAIN is off) -> statistics.

    The targets and the counts are made from every node as it is now, read here in one
    query (None, as both sweeps pass) or just before by the caller (`rows`), never from
    the rows the probe started from: a node deregistered, renamed, moved or put in
    maintenance while the probe ran (seconds, at scale) is written as it now is, not
    listed under its old labels for one more interval.
    """
    if rows is None:
        rows = load_targets()
    count_statuses(stats, rows)
    write_targets_step(rows, stats, sd_dir)
    push_pending()
    queue_node_alerts()
    queue_drain_pass()
    stats.finished_at = time.time()
    stats.duration = stats.finished_at - stats.started_at
    record(stats)
    log.info(
        "sweep: %d nodes in %d chunk(s), %d online, %d offline, %d changed, %d confirmed in %.2f s",
        stats.nodes,
        stats.chunks,
        stats.online,
        stats.offline,
        stats.changed,
        stats.confirmed,
        stats.duration,
    )
    return stats


def run_sweep(
    probe: ProbeFunction | None = None, sd_dir: Path | None = None, fence: Fence | None = None
) -> SweepStats:
    """Probe every node once and apply what the probes say, in this process.

    `fence` is the lock and token of the task that runs it; without one (a test, a
    benchmark, a shell) the sweep claims a fresh token, which fences off any older
    sweep still running. Raises SweepLockLost, having written nothing, when it lost it.
    """
    stats = probe_and_save(fence or Fence.claim(), probe=probe)
    return publish(stats, sd_dir=sd_dir)


def count_statuses(stats: SweepStats, rows: Iterable[dict]) -> None:
    """Online, Offline and maintenance counts of the fleet after the sweep."""
    for row in rows:
        stats.online += row["status"] == NodeStatus.ONLINE
        stats.offline += row["status"] == NodeStatus.OFFLINE
        stats.maintenance += bool(row["maintenance"])


def count_changes(stats: SweepStats, judgement: Judgement, probes: dict[int, NodeProbe]) -> None:
    """What the sweep changed and how its probes ended, added to the statistics."""
    stats.changed += len(judgement.changed)
    stats.verdicts_changed += len(judgement.health.changed_ids)
    stats.went_online += sum(event.kind == EventKind.ONLINE for event in judgement.events)
    stats.went_offline += sum(event.kind == EventKind.OFFLINE for event in judgement.events)
    for result in probes.values():
        for single in result.results.values():
            stats.probes += 1
            key = single.outcome.value
            stats.outcomes[key] = stats.outcomes.get(key, 0) + 1


def record(stats: SweepStats) -> None:
    """Keep the sweep's figures for /health and /metrics; a Redis hiccup is only logged."""
    try:
        record_sweep(get_redis(), stats)
    except Exception:
        log.warning("could not record sweep statistics in Redis", exc_info=True)
