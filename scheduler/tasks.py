"""The Celery side of the scheduler link: the drain pass, queued by the sweep, and the
read of job attribution (scheduler.jobread), on the beat schedule beside the sweep.

The sweep (healthcheck.sweep.publish) calls `queue_drain_pass` once its write is
published, as it queues the node alerts' post: a slow or absent slurmctld never holds a
sweep up, and the drain sees the verdicts that sweep wrote. Passes never overlap (a
cache lock that outlives a hung one only by the Slurm tools' deadline); one still
waiting when the next sweep queues a fresher one is dropped (`expires`).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import asdict

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from scheduler.config import slurm_client, slurm_configured
from scheduler.drainpass import needs_pass, run_drain_pass
from scheduler.jobread import close_all, read_jobs
from scheduler.slurm import SlurmError

log = logging.getLogger(__name__)

LOCK_KEY = "scheduler:drain:lock"
# A pass asks slurmctld a handful of times, each within the client's 10 s deadline.
LOCK_SECONDS = 120


@shared_task(
    name="scheduler.tasks.drain_nodes",
    ignore_result=True,
    expires=settings.PROBE_INTERVAL,
)
def drain_nodes() -> dict:
    token = secrets.token_hex(8)
    if not cache.add(LOCK_KEY, token, timeout=LOCK_SECONDS):
        return {"ran": False, "reason": "another pass is running"}
    try:
        result = run_drain_pass()
    finally:
        _release(LOCK_KEY, token)
    if result.skipped:
        return {"ran": False, "reason": result.skipped, "error": result.error}
    return {
        "ran": True,
        "done": [f"{step.decision} {step.node.slurm_name}" for step in result.done],
        "recorded": len(result.recorded),
        "error": result.error,
    }


def _release(key: str, token: str) -> None:
    """Free the lock only where it is still this run's: one that outlived LOCK_SECONDS
    has lost it, and the lock is now the next run's."""
    if cache.get(key) == token:
        cache.delete(key)


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
    token = secrets.token_hex(8)
    if not cache.add(JOBS_LOCK_KEY, token, timeout=LOCK_SECONDS):
        return {"ran": False, "reason": "another read is running"}
    try:
        result = read_jobs(slurm_client())
    except SlurmError as exc:
        log.warning("job attribution: could not read Slurm: %s", exc)
        return {"ran": False, "reason": str(exc)}
    finally:
        _release(JOBS_LOCK_KEY, token)
    return {"ran": True, **asdict(result)}
