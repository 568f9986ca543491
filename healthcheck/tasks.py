"""The Celery side of probing: a thin task around healthcheck.sweep.run_sweep.

Beat (macweb/celery.py) sends `probe_fleet` every MAC_PROBE_INTERVAL seconds
with an expiry below the interval, so a sweep that could not start in time is
dropped instead of piling up behind the next one. The task itself refuses to
run while another sweep holds the lock, or when a sweep already ran in this
interval (two beat processes by mistake); see healthcheck.state. While the
sweep runs, a heartbeat keeps its lock extended, however long the sweep takes;
before it writes, the sweep checks the lock is still its own, and gives up
(writing nothing) when it is not.

acks_late with reject_on_worker_lost: the message is acknowledged only after
the sweep, so a worker killed mid-sweep gives the message back. Nothing else
needs saving: the inventory is written in one transaction at the end, and the
next sweep probes everything again anyway.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

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


@shared_task(
    name="healthcheck.tasks.probe_fleet",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    # Also for sweeps queued by hand (probe_fleet.delay()): stale ones are dropped.
    expires=settings.PROBE_INTERVAL * 0.9,
)
def probe_fleet(force: bool = False) -> dict:
    """Run one sweep unless one is running or already ran this interval.

    force=True skips the once-per-interval check (an operator asking for a
    sweep now) but never the running lock.
    """
    client = get_redis()
    lock = SweepLock(client, lock_ttl_ms(settings.PROBE_INTERVAL))
    if not lock.acquire():
        log.info("sweep skipped: another sweep is running")
        return {"ran": False, "reason": "running"}
    try:
        if not force and not take_slot(client, settings.PROBE_INTERVAL):
            log.info("sweep skipped: a sweep already ran in this interval")
            return {"ran": False, "reason": "interval"}
        with LockHeartbeat(lock) as heartbeat:
            stats = run_sweep(on_step=heartbeat.check)
    except SweepLockLost as exc:
        log.warning("sweep abandoned before writing: %s", exc)
        return {"ran": False, "reason": "lock lost"}
    finally:
        lock.release()
    return {"ran": True, "nodes": stats.nodes, "changed": stats.changed, "duration": stats.duration}
