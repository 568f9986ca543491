"""The Celery side of probing: thin tasks around healthcheck.sweep and healthcheck.chunks.

Beat (macweb/celery.py) sends `probe_fleet` every MAC_PROBE_INTERVAL seconds
with an expiry below the interval, so a sweep that could not start in time is
dropped instead of piling up behind the next one. The task itself refuses to
run while another sweep holds the lock, or when a sweep already ran in this
interval (two beat processes by mistake); see healthcheck.state. A sweep that
runs claims a fencing token (healthcheck.fence): while it runs, a heartbeat keeps
its lock extended, however long it takes, and its write commits only while it
still holds both.

A fleet of at most MAC_SWEEP_CHUNK_SIZE nodes is swept inside probe_fleet
(sweep.run_sweep). A larger one is split into a Celery chord: one `probe_chunk` per
id range (routed to MAC_PROBE_QUEUE by settings.CELERY_TASK_ROUTES) and
`finish_sweep` as its callback, which publishes the sweep and releases the lock
(healthcheck.chunks says why nothing is lost or doubled), or, when Celery failed a
chunk task itself, `release_sweep` as the callback's error callback, which only
releases the lock. probe_fleet returns as soon as the chord is sent, its lock handed
over. Called directly (`manage.py probe_fleet`, tests), probe_fleet always sweeps in
the calling process.

acks_late and task_reject_on_worker_lost (settings, for every task): a message is
acknowledged only after its task ran, so a pool process killed mid-task gives it
back at once, and a whole worker killed leaves it to the broker's visibility
timeout (settings.CELERY_BROKER_TRANSPORT_OPTIONS), which outlasts a chunk of
MAC_SWEEP_CHUNK_SIZE nodes: a lost chunk runs again, in the same sweep while its
lock still holds, else its nodes wait for the next one.
"""

from __future__ import annotations

import logging
import time

from celery import chord, shared_task
from django.conf import settings

from healthcheck import chunks
from healthcheck.fence import Fence
from healthcheck.state import (
    LockHeartbeat,
    SweepLockLost,
    get_redis,
    lock_token,
    record_queue_depth,
    release_quietly,
    sweep_lock,
    take_slot,
)
from healthcheck.sweep import run_sweep

log = logging.getLogger(__name__)

# A chunk still queued this many intervals after its sweep began is dropped by the
# worker that takes it, without touching the database. A late chunk that does start
# is fenced anyway.
CHUNK_EXPIRY_INTERVALS = 3


@shared_task(
    name="healthcheck.tasks.probe_fleet",
    bind=True,
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
    if not self.request.called_directly:
        sample_chunk_queue(self.app)
    lock = sweep_lock(client)
    if not lock.acquire():
        log.info("sweep skipped: another sweep is running")
        return {"ran": False, "reason": "running"}
    handed_over = False  # True once the chord holds the lock: its callback releases it
    try:
        if not force and not take_slot(client, settings.PROBE_INTERVAL):
            log.info("sweep skipped: a sweep already ran in this interval")
            return {"ran": False, "reason": "interval"}
        fence = Fence.claim(lock)
        size = settings.SWEEP_CHUNK_SIZE
        if not self.request.called_directly and chunks.node_count() > size:
            ranges = chunks.plan_fleet(size)
            if len(ranges) > 1:
                send_chunks(lock_token(lock), fence.token, ranges)
                handed_over = True
                return {"ran": True, "sharded": True, "chunks": len(ranges)}
        with LockHeartbeat(lock):
            stats = run_sweep(fence=fence)
    except SweepLockLost as exc:
        log.warning("sweep abandoned, nothing written: %s", exc)
        return {"ran": False, "reason": "lock lost"}
    finally:
        if not handed_over:
            release_quietly(lock)
    return {"ran": True, "nodes": stats.nodes, "changed": stats.changed, "duration": stats.duration}


def send_chunks(token: str, fence: int, ranges: list[tuple[int, int]]) -> None:
    """Send the sweep's chord (sweep_chord)."""
    sweep_chord(token, fence, time.time(), ranges).apply_async()
    log.info("sweep %s (fence %d): %d chunks sent", token[:8], fence, len(ranges))


def sweep_chord(token: str, fence: int, started_at: float, ranges: list[tuple[int, int]]) -> chord:
    """A probe_chunk per id range, finish_sweep once they have all returned.

    A chunk's own errors come back as its result (chunks.run_chunk). A header task that
    Celery fails itself (a time limit, an expiry) makes the chord skip finish_sweep and
    call its error callback instead, release_sweep, which frees the lock for the next tick.
    """
    expires = settings.PROBE_INTERVAL * CHUNK_EXPIRY_INTERVALS
    header = [
        probe_chunk.si(token, fence, started_at, low, high).set(expires=expires)
        for low, high in ranges
    ]
    finish = finish_sweep.s(token, fence, started_at).on_error(release_sweep.s(token=token))
    return chord(header, finish)


def sample_chunk_queue(app) -> None:
    """Record how many chunk tasks wait in MAC_PROBE_QUEUE, for /health (healthcheck.health).

    Only a queue other than Celery's default needs it: the default one is consumed by
    the very worker running this task. Through kombu's passive queue_declare, which
    counts the queue's messages on any broker; a failure only costs the sample.
    """
    queue = settings.PROBE_QUEUE
    if queue == app.conf.task_default_queue:
        return
    try:
        with app.connection_for_read() as connection:
            try:
                declared = connection.default_channel.queue_declare(queue=queue, passive=True)
                depth = declared.message_count
            except connection.channel_errors:  # no such queue yet: nothing waits in it
                depth = 0
        record_queue_depth(get_redis(), queue, depth, time.time())
    except Exception:
        log.warning("could not sample the chunk queue %r", queue, exc_info=True)


@shared_task(name="healthcheck.tasks.probe_chunk", ignore_result=False)
def probe_chunk(token: str, fence: int, started_at: float, low: int, high: int) -> dict:
    """One id range of a sharded sweep; its result goes to the chord's callback."""
    return chunks.run_chunk(token, fence, started_at, (low, high))


@shared_task(name="healthcheck.tasks.finish_sweep", ignore_result=True)
def finish_sweep(results: list[dict], token: str, fence: int, started_at: float) -> dict:
    """The chord's callback: targets files, the one push and the statistics (on the master)."""
    stats = chunks.finish(token, fence, started_at, results)
    if stats is None:
        return {"ran": False, "reason": "finished"}
    return {"ran": True, "nodes": stats.nodes, "changed": stats.changed, "duration": stats.duration}


@shared_task(name="healthcheck.tasks.release_sweep", ignore_result=True)
def release_sweep(request, exc, traceback, token: str) -> bool:
    """The chord's error callback (Celery's errback signature: the failed request, its
    exception and traceback): release the sweep's lock by its token, so that the next
    tick sweeps again. The nodes its chunks changed stay pending; that sweep pushes them."""
    log.warning(
        "sweep %s: a chunk task failed (%s); its lock is released, the next sweep publishes",
        token[:8],
        exc,
    )
    return release_quietly(sweep_lock(get_redis(), token))
