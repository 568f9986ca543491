"""Sharded sweeps: one sweep split into chunk tasks that any number of Celery workers share.

Why: one process sweeps about 10,000 nodes in a few seconds; past that, a sweep is
split by node-id range (MAC_SWEEP_CHUNK_SIZE nodes a chunk) and workers on any number
of machines take a chunk each (chunk tasks go to MAC_PROBE_QUEUE, so probe workers can
sit near the nodes they probe), while the targets files and the dashboard push stay
one per sweep, made by a finishing task on the master. The steps are healthcheck.sweep's:

    probe_fleet  -> plan, begin:  id ranges, the sweep's record in Redis
    probe_chunk  -> run_chunk:    load_nodes(range) -> probe_nodes -> judge -> save_changes
    finish_sweep -> finish:       load_nodes -> write_targets_for -> broadcast_nodes -> record

Nothing lost, nothing doubled, whatever the order chunks end in or a worker's death:
- the sweep's id is the token of the `running` lock (healthcheck.state), held from
  probe_fleet to finish_sweep: each chunk extends it while it runs and checks it before
  writing, so a late chunk of a sweep that was given up (its lock expired, a newer
  sweep runs) writes nothing;
- a chunk whose worker died is handed back by the broker (acks_late,
  reject_on_worker_lost) and runs again: it reloads its rows, so it judges against
  whatever the first attempt committed, and two attempts at once are serialized by
  save_changes' optimistic concurrency: each status change gives one event;
- before its transaction commits, a chunk adds the nodes it changed to a pending set
  that the finishing step empties only after pushing them: a change is pushed at least
  once, by the next sweep that finishes if this one never does;
- the chunk that completes the set of reported chunks (one Lua script, atomic) asks
  for the finishing task, and so does a retry of it; finish runs once per sweep.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from contract.liveness import ProbeStats
from healthcheck.state import (
    PREFIX,
    LockHeartbeat,
    SweepLock,
    SweepLockLost,
    SweepStats,
    get_redis,
    lock_ttl_ms,
)
from healthcheck.sweep import (
    ProbeFunction,
    broadcast_nodes,
    count_changes,
    count_statuses,
    judge,
    load_nodes,
    probe_nodes,
    record,
    save_changes,
    write_targets_step,
)
from inventory.models import Node

log = logging.getLogger(__name__)

SHARD_PREFIX = PREFIX + "shard:"
PENDING_KEY = PREFIX + "pending"  # ids of nodes changed by a chunk and not pushed yet

# Adds the chunk to the sweep's reported set; 1 when every chunk has reported and the
# sweep is not finished yet (the caller then asks for finish_sweep; finish runs once).
_REPORT = """
redis.call('sadd', KEYS[1], ARGV[1])
redis.call('pexpire', KEYS[1], ARGV[2])
local total = redis.call('hget', KEYS[2], 'chunks')
if not total then return 0 end
if redis.call('scard', KEYS[1]) >= tonumber(total)
   and redis.call('hexists', KEYS[2], 'finished') == 0 then return 1 end
return 0
"""


def _keys(sweep_id: str) -> tuple[str, str, str]:
    """The sweep's record (hash), its reported chunks (set), its chunks' figures (hash)."""
    base = SHARD_PREFIX + sweep_id
    return base, base + ":done", base + ":stats"


def record_ttl_ms(interval: float) -> int:
    """How long a sweep's record outlives it: long enough for any late or retried task."""
    return int(max(10 * interval, 120) * 1000)


@dataclass
class ChunkResult:
    """What one chunk task did; `complete` asks the caller for the finishing task."""

    ran: bool
    reason: str = ""
    nodes: int = 0
    changed: int = 0
    complete: bool = False


def node_count() -> int:
    return Node.objects.count()


def plan(ids: Sequence[int], size: int) -> list[tuple[int, int]]:
    """Consecutive id ranges (lo, hi), inclusive, of at most `size` nodes each."""
    if size < 1:
        raise ValueError(f"MAC_SWEEP_CHUNK_SIZE must be at least 1, not {size}")
    ordered = sorted(ids)
    return [
        (ordered[start], ordered[min(start + size, len(ordered)) - 1])
        for start in range(0, len(ordered), size)
    ]


def plan_fleet(size: int) -> list[tuple[int, int]]:
    """plan() over every node registered now."""
    return plan(list(Node.objects.order_by("id").values_list("id", flat=True)), size)


def begin(client: redis.Redis, sweep_id: str, chunks: int, started_at: float) -> None:
    """Record a sharded sweep before its chunks are sent."""
    meta, _done, _stats = _keys(sweep_id)
    pipe = client.pipeline(transaction=True)
    pipe.hset(meta, mapping={"chunks": chunks, "started_at": repr(started_at)})
    pipe.pexpire(meta, record_ttl_ms(settings.PROBE_INTERVAL))
    pipe.execute()


def _started_at(client: redis.Redis, sweep_id: str) -> float | None:
    raw = client.hget(_keys(sweep_id)[0], "started_at")
    return float(raw) if raw else None


def _report_changes(
    client: redis.Redis, sweep_id: str, index: int, ids: list[int], stats: SweepStats
) -> None:
    """The chunk's changed nodes and figures; called inside its transaction, before commit.

    Before the commit, so that a worker dying right after it loses no push (a commit that
    then fails pushes unchanged nodes, which is harmless). HSETNX: the figures of a retry
    never replace those of the attempt that wrote the changes.
    """
    _meta, _done, stats_key = _keys(sweep_id)
    pipe = client.pipeline(transaction=True)
    if ids:
        pipe.sadd(PENDING_KEY, *ids)
    pipe.hsetnx(stats_key, str(index), json.dumps(asdict(stats)))
    pipe.pexpire(stats_key, record_ttl_ms(settings.PROBE_INTERVAL))
    pipe.execute()


def run_chunk(
    sweep_id: str,
    index: int,
    id_range: tuple[int, int],
    probe: ProbeFunction | None = None,
    client: redis.Redis | None = None,
) -> ChunkResult:
    """Probe, judge and save the nodes with lo <= id <= hi, for the sweep `sweep_id`."""
    client = client or get_redis()
    started_at = _started_at(client, sweep_id)
    lock = SweepLock.resume(client, lock_ttl_ms(settings.PROBE_INTERVAL), sweep_id)
    if started_at is None or not lock.extend():
        log.info("sweep chunk %d skipped: its sweep is over or was given up", index)
        return ChunkResult(ran=False, reason="sweep over")
    try:
        with LockHeartbeat(lock) as heartbeat:
            rows = load_nodes(id_range)
            probe_stats = ProbeStats()
            probes = probe_nodes(rows, probe, probe_stats)
            probed_at = time.time()
            heartbeat.check()  # the fence: this sweep still holds the lock
            now = timezone.now()
            judgement = judge(rows, probes, now)
            with transaction.atomic():
                save_changes(judgement, now)
                stats = SweepStats(started_at=started_at, nodes=len(rows))
                stats.probe_duration = probed_at - started_at
                stats.confirmed = probe_stats.confirmed
                count_changes(stats, judgement, probes)
                changed_ids = [row["id"] for row in judgement.changed]
                _report_changes(client, sweep_id, index, changed_ids, stats)
    except SweepLockLost as exc:
        log.warning("sweep chunk %d abandoned before writing: %s", index, exc)
        return ChunkResult(ran=False, reason="lock lost")
    meta, done, _stats = _keys(sweep_id)
    ttl = record_ttl_ms(settings.PROBE_INTERVAL)
    complete = bool(client.eval(_REPORT, 2, done, meta, str(index), ttl))
    return ChunkResult(ran=True, nodes=len(rows), changed=len(judgement.changed), complete=complete)


def _merge(stats: SweepStats, chunk: dict) -> None:
    stats.nodes += chunk["nodes"]
    stats.changed += chunk["changed"]
    stats.went_online += chunk["went_online"]
    stats.went_offline += chunk["went_offline"]
    stats.probes += chunk["probes"]
    stats.confirmed += chunk["confirmed"]
    stats.probe_duration = max(stats.probe_duration, chunk["probe_duration"])
    for outcome, count in chunk["outcomes"].items():
        stats.outcomes[outcome] = stats.outcomes.get(outcome, 0) + count


def push_pending(client: redis.Redis) -> int:
    """Push every node a chunk changed and no finish has pushed yet; then forget them."""
    ids = sorted(int(raw) for raw in client.smembers(PENDING_KEY))
    if ids:
        broadcast_nodes(ids)
        client.srem(PENDING_KEY, *ids)
    return len(ids)


def finish(
    sweep_id: str, sd_dir: Path | None = None, client: redis.Redis | None = None
) -> SweepStats | None:
    """Targets, the one push and the statistics of a sharded sweep; releases its lock.

    None when the sweep is unknown (its record expired) or already finished.
    """
    client = client or get_redis()
    meta, _done, stats_key = _keys(sweep_id)
    started_at = _started_at(client, sweep_id)
    if started_at is None or not client.hsetnx(meta, "finished", repr(time.time())):
        return None
    lock = SweepLock.resume(client, lock_ttl_ms(settings.PROBE_INTERVAL), sweep_id)
    try:
        stats = SweepStats(started_at=started_at)
        chunks = [json.loads(raw) for raw in client.hvals(stats_key)]
        for chunk in chunks:
            _merge(stats, chunk)
        stats.chunks = len(chunks)
        rows = load_nodes()
        count_statuses(stats, rows)
        write_targets_step(rows, stats, sd_dir)
        push_pending(client)
        stats.finished_at = time.time()
        stats.duration = stats.finished_at - started_at
        record(stats)
    finally:
        lock.release()  # by token: never a newer sweep's lock
    log.info(
        "sweep: %d nodes in %d chunks, %d online, %d offline, %d changed in %.2f s",
        stats.nodes,
        stats.chunks,
        stats.online,
        stats.offline,
        stats.changed,
        stats.duration,
    )
    return stats
