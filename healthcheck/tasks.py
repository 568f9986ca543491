"""The Celery side of probing: thin tasks around healthcheck.sweep and healthcheck.chunks.

Beat (macweb/celery.py) sends `probe_fleet` every MAC_PROBE_INTERVAL seconds
with an expiry below the interval, so a sweep that could not start in time is
dropped instead of piling up behind the next one. The task itself refuses to
run while another sweep holds the lock, or when a sweep already ran in this
interval (two beat processes by mistake); see healthcheck.state. While the
sweep runs, a heartbeat keeps its lock extended, however long the sweep takes;
before it writes, the sweep checks the lock is still its own, and gives up
(writing nothing) when it is not.

A fleet of at most MAC_SWEEP_CHUNK_SIZE nodes is swept inside probe_fleet, as it
always was. A larger one is split: probe_fleet sends one `probe_chunk` per id range
(routed to MAC_PROBE_QUEUE by settings.CELERY_TASK_ROUTES) and returns, its lock
still held; the chunk that completes the set sends `finish_sweep`, which writes the
targets, pushes, records and releases the lock (healthcheck.chunks says why nothing
is lost or doubled). Called directly (`manage.py probe_fleet`, tests), probe_fleet
always sweeps in the calling process.

acks_late with reject_on_worker_lost, on every task: a message is acknowledged only
after its task ran, so a worker killed mid-task gives it back. A whole sweep writes
the inventory in one transaction at its end, a chunk in one transaction for its
range, and the next sweep probes everything again anyway.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict

from celery import shared_task
from django.conf import settings

from healthcheck import chunks
from healthcheck.state import (
    LockHeartbeat,
    SweepLock,
    SweepLockLost,
    get_redis,
    lock_ttl_ms,
    take_slot,
)
from healthcheck.sweep import run_sweep

log = logging.getLogger(__name__)

# A chunk still queued this many intervals after its sweep began is dropped by the
# worker: only a queue nobody consumes (MAC_PROBE_QUEUE without workers) gets there,
# and it must not fill up. A late chunk that does start is fenced by the lock anyway.
CHUNK_EXPIRY_INTERVALS = 3


@shared_task(
    name="healthcheck.tasks.probe_fleet",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    # Also for sweeps queued by hand (probe_fleet.delay()): stale ones are dropped.
    expires=settings.PROBE_INTERVAL * 0.9,
)
def probe_fleet(self, force: bool = False) -> dict:
    """Run one sweep unless one is running or already ran this interval.

    force=True skips the once-per-interval check (an operator asking for a
    sweep now) but never the running lock.
    """
    client = get_redis()
    lock = SweepLock(client, lock_ttl_ms(settings.PROBE_INTERVAL))
    if not lock.acquire():
        log.info("sweep skipped: another sweep is running")
        return {"ran": False, "reason": "running"}
    handed_over = False  # True once chunk tasks hold the lock: finish_sweep releases it
    try:
        if not force and not take_slot(client, settings.PROBE_INTERVAL):
            log.info("sweep skipped: a sweep already ran in this interval")
            return {"ran": False, "reason": "interval"}
        size = settings.SWEEP_CHUNK_SIZE
        if not self.request.called_directly and chunks.node_count() > size:
            ranges = chunks.plan_fleet(size)
            if len(ranges) > 1:
                send_chunks(lock.token, ranges)
                handed_over = True
                return {"ran": True, "sharded": True, "chunks": len(ranges)}
        with LockHeartbeat(lock) as heartbeat:
            stats = run_sweep(on_step=heartbeat.check)
    except SweepLockLost as exc:
        log.warning("sweep abandoned before writing: %s", exc)
        return {"ran": False, "reason": "lock lost"}
    finally:
        if not handed_over:
            lock.release()
    return {"ran": True, "nodes": stats.nodes, "changed": stats.changed, "duration": stats.duration}


def send_chunks(sweep_id: str, ranges: list[tuple[int, int]]) -> None:
    """Record the sweep, then one probe_chunk message per range over one producer."""
    chunks.begin(get_redis(), sweep_id, len(ranges), time.time())
    expires = settings.PROBE_INTERVAL * CHUNK_EXPIRY_INTERVALS
    with probe_chunk.app.producer_or_acquire() as producer:
        for index, (low, high) in enumerate(ranges):
            probe_chunk.apply_async(
                (sweep_id, index, low, high), expires=expires, producer=producer
            )
    log.info("sweep %s: %d chunks sent", sweep_id[:8], len(ranges))


@shared_task(
    name="healthcheck.tasks.probe_chunk",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def probe_chunk(sweep_id: str, index: int, low: int, high: int) -> dict:
    """One id range of a sharded sweep; the chunk that completes it sends finish_sweep."""
    result = chunks.run_chunk(sweep_id, index, (low, high))
    if result.complete:
        finish_sweep.delay(sweep_id)
    return asdict(result)


@shared_task(
    name="healthcheck.tasks.finish_sweep",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def finish_sweep(sweep_id: str) -> dict:
    """Targets files, the one push and the statistics of a sharded sweep (on the master)."""
    stats = chunks.finish(sweep_id)
    if stats is None:
        return {"ran": False, "reason": "finished"}
    return {"ran": True, "nodes": stats.nodes, "changed": stats.changed, "duration": stats.duration}
