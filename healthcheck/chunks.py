"""Sharded sweeps: one sweep split into chunk tasks that any number of Celery workers share.

Why: one process sweeps about 10,000 nodes in a few seconds; past that, a sweep is
split by node-id range (MAC_SWEEP_CHUNK_SIZE nodes a chunk) and workers on any number
of machines take a chunk each (chunk tasks go to MAC_PROBE_QUEUE, so probe workers can
sit near the nodes they probe), while the targets files and the dashboard push stay
one per sweep, made by the chord's callback on the master. The halves are
healthcheck.sweep's, the same ones run_sweep runs:

    probe_fleet  -> plan, Celery chord:   id ranges, the lock's token, the fence
    probe_chunk  -> run_chunk:            probe_and_save(fence, range)
    finish_sweep -> finish (callback):    publish(the chunks' figures)

Nothing lost, nothing doubled, whatever the order chunks end in or a worker's death:
- the lock taken by probe_fleet is held until the callback releases it: each chunk
  extends it while it runs, and every chunk's write is fenced (healthcheck.fence), so
  a late chunk of a sweep that was given up (its lock expired, a newer sweep runs)
  commits nothing;
- a chunk whose worker died is handed back by the broker (acks_late,
  task_reject_on_worker_lost, the visibility timeout of macweb/settings.py) and runs
  again: it reloads its rows, so it judges against whatever the first attempt
  committed, and two attempts at once are serialized by save_changes' optimistic
  concurrency: each status change gives one event;
- the chord (Celery's, with Redis as its result backend) calls the callback once,
  when every chunk has returned, whatever order they ended in; the callback does its
  work only while the sweep's lock is still its own, and releases it, so a second
  call of it (a redelivered callback) does nothing;
- the nodes a chunk changed are kept in the pending set (healthcheck.state) until a
  finished sweep has pushed them: a change is pushed at least once, by the next sweep
  that finishes if this one never does;
- a chunk that raises (Redis or the database away for a moment, a bug on one range's
  rows) rolls its write back and returns its error instead of failing its task: Celery
  never calls a chord's callback after a failed header task, so one such chunk would
  leave the whole fleet unpublished and the lock held past the next tick. The callback
  counts it in the sweep's figures (/health names it) and its nodes are probed by the
  next sweep. A chunk that Celery itself fails (a time limit, an expiry) makes the
  chord call its error callback, which releases the lock by token (healthcheck.tasks).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import redis

from healthcheck.fence import Fence, current_fence
from healthcheck.state import (
    LockHeartbeat,
    SweepLockLost,
    SweepStats,
    get_redis,
    release_quietly,
    sweep_lock,
)
from healthcheck.sweep import ProbeFunction, probe_and_save, publish
from inventory.models import Node

log = logging.getLogger(__name__)


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


def run_chunk(
    token: str,
    fence: int,
    started_at: float,
    id_range: tuple[int, int],
    probe: ProbeFunction | None = None,
    client: redis.Redis | None = None,
) -> dict:
    """Probe, judge and save the nodes with lo <= id <= hi, for the sweep whose lock
    token and fencing token these are. What it did, for the chord's callback:
    {"ran": True, "stats": ...} or {"ran": False, "reason": ...}."""
    lock = sweep_lock(client or get_redis(), token)
    try:
        if not lock.owned():
            log.info("sweep chunk %s skipped: its sweep is over or was given up", id_range)
            return {"ran": False, "reason": "sweep over"}
        with LockHeartbeat(lock):
            stats = probe_and_save(Fence(fence, lock), id_range, probe, started_at)
    except SweepLockLost as exc:
        log.warning("sweep chunk %s abandoned, nothing written: %s", id_range, exc)
        return {"ran": False, "reason": "lock lost"}
    except Exception as exc:  # its write rolled back: the callback must still run (docstring)
        log.exception("sweep chunk %s failed, nothing written; the next sweep probes it", id_range)
        error = f"nodes {id_range[0]}..{id_range[1]}: {type(exc).__name__}: {exc}"
        return {"ran": False, "reason": "error", "error": error[:300]}
    return {"ran": True, "stats": asdict(stats)}


def finish(
    token: str,
    fence: int,
    started_at: float,
    results: Sequence[dict],
    sd_dir: Path | None = None,
    client: redis.Redis | None = None,
) -> SweepStats | None:
    """The chord's callback: publish the sweep (targets, one push, statistics) from its
    chunks' results, then release its lock.

    None when the sweep is no longer this lock's (given up, superseded, or already
    finished by an earlier call): the next sweep that finishes publishes for it.
    """
    lock = sweep_lock(client or get_redis(), token)
    if not lock.owned() or current_fence() > fence:
        log.info("sweep callback skipped: the sweep is over or was given up")
        return None
    stats = SweepStats(started_at=started_at, chunks=0)
    for result in results:
        if result and result.get("ran"):
            stats.add(result["stats"])
            stats.chunks += 1
        elif result and result.get("reason") == "error":
            stats.chunks_failed += 1
            stats.chunk_error = stats.chunk_error or result.get("error", "")
    if stats.chunks_failed:
        log.warning(
            "sweep: %d of %d chunks failed (first: %s); the next sweep probes their nodes",
            stats.chunks_failed,
            len(results),
            stats.chunk_error,
        )
    try:
        with LockHeartbeat(lock):
            publish(stats, sd_dir=sd_dir)
    finally:
        release_quietly(lock)
    return stats
