"""The Celery side of the scheduler link: the drain pass, queued by the sweep, and the
read of job attribution (scheduler.jobread), on the beat schedule beside the sweep.

The sweep (healthcheck.sweep.publish) calls `queue_drain_pass` once its write is
published, as it queues the node alerts' post: a slow or absent slurmctld never holds a
sweep up, and the drain sees the verdicts that sweep wrote. Passes never act side by
side: a pass holds redis-py's Lock and renews it before each command it sends to Slurm
(`reacquire`), so the lock outlives a hung pass only by LOCK_SECONDS, and a pass that
stalled past it, and lost the lock to the next one, stops acting (scheduler.drainpass).
One still waiting when the next sweep queues a fresher one is dropped (`expires`).
The job read holds the same kind of lock, for LOCK_SECONDS without renewal. Neither runs
where Redis does not answer: the result and the log say so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict

import redis
from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from redis.exceptions import LockError
from redis.lock import Lock

from scheduler.config import slurm_client, slurm_configured
from scheduler.drainpass import needs_pass, run_drain_pass
from scheduler.jobread import close_all, read_jobs
from scheduler.slurm import SlurmError

log = logging.getLogger(__name__)

LOCK_KEY = "scheduler:drain:lock"
# The drain pass renews its lock before each command, each within the client's 10 s
# deadline; its reads before the first (ping, nodes, reservations) take three of them.
# The job read asks slurmctld a handful of times, and holds its lock for all of them.
LOCK_SECONDS = 120


@shared_task(
    name="scheduler.tasks.drain_nodes",
    ignore_result=True,
    expires=settings.PROBE_INTERVAL,
)
def drain_nodes() -> dict:
    return _one_at_a_time(LOCK_KEY, "drain", "another pass is running", _drain_pass)


def _drain_pass(lock: Lock) -> dict:
    result = run_drain_pass(still_held=lambda: _renewed(lock))
    if result.skipped:
        return {"ran": False, "reason": result.skipped, "error": result.error}
    return {
        "ran": True,
        "done": [f"{step.decision} {step.node.slurm_name}" for step in result.done],
        "recorded": len(result.recorded),
        "error": result.error,
    }


def _one_at_a_time(key: str, what: str, busy: str, run: Callable[[Lock], dict]) -> dict:
    """run(lock) under redis-py's Lock on `key` (LOCK_SECONDS, not waited for); `busy` where
    another run holds it. A Redis that does not answer runs nothing (without the lock two
    runs could act side by side): the result and the log, under `what`, say so."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    try:
        lock = client.lock(cache.make_key(key), timeout=LOCK_SECONDS)
        try:
            if not lock.acquire(blocking=False):
                return {"ran": False, "reason": busy}
        except redis.RedisError as exc:
            log.warning("%s: not run, its lock cannot be taken (Redis: %s)", what, exc)
            return {"ran": False, "reason": f"Redis: {exc}"}
        try:
            return run(lock)
        finally:
            with suppress(LockError, redis.RedisError):  # lost already, or Redis gone
                lock.release()
    finally:
        client.close()


def _renewed(lock: Lock) -> bool:
    """Renew the pass's lock for LOCK_SECONDS more; False where it is no longer this pass's
    (it expired, and the next pass may hold it) or Redis cannot say: stop acting then."""
    try:
        lock.reacquire()
    except LockError:
        log.warning("drain: the pass's lock expired (LOCK_SECONDS=%d): it stops", LOCK_SECONDS)
        return False
    except redis.RedisError as exc:
        log.warning("drain: the pass's lock not renewed (Redis: %s): it stops", exc)
        return False
    return True


def queue_drain_pass() -> None:
    """Queue drain_nodes for a worker when the drain has work; a refusing broker is logged."""
    try:
        if not needs_pass():
            return
        drain_nodes.apply_async(retry=False)
    except Exception as exc:
        log.warning("could not queue the drain pass: %s", exc)


JOBS_LOCK_KEY = "scheduler:jobs:lock"


@shared_task(
    name="scheduler.tasks.read_slurm_jobs",
    ignore_result=True,
    expires=settings.PROBE_INTERVAL,
)
def read_slurm_jobs() -> dict:
    """One read of job attribution (scheduler.jobread), while slurm.conf exists."""
    if not slurm_configured():
        # Attribution switched off: no read will close the GPU rows still open.
        closed = close_all()
        if closed:
            log.info("job attribution is off (no slurm.conf): %d GPU allocations closed", closed)
        return {"ran": False, "reason": f"no slurm.conf at {settings.SLURM_CONF}"}
    # redis-py's Lock, as the drain pass's: its release (compare and delete in one script)
    # frees only this read's, never the next read's once this one outlived LOCK_SECONDS.
    return _one_at_a_time(JOBS_LOCK_KEY, "job attribution", "another read is running", _read_jobs)


def _read_jobs(_lock: Lock) -> dict:
    try:
        result = read_jobs(slurm_client())
    except SlurmError as exc:
        # with MAC's fix where it has one (a refused credential: the munge key)
        log.warning("job attribution: could not read Slurm: %s", f"{exc} {exc.fix}".strip())
        return {"ran": False, "reason": str(exc)}
    return {"ran": True, **asdict(result)}
