"""The Slurm tasks' locks (scheduler.tasks): a run frees only its own."""

from __future__ import annotations

from django.core.cache import cache

from scheduler import tasks


def test_a_run_that_outlived_its_lock_leaves_the_next_runs_lock_alone():
    cache.delete(tasks.LOCK_KEY)
    try:
        # This run's lock expired during a long pass; the next pass holds a new one.
        cache.set(tasks.LOCK_KEY, "the-next-pass", timeout=60)
        tasks._release(tasks.LOCK_KEY, "this-pass")
        assert cache.get(tasks.LOCK_KEY) == "the-next-pass"
        tasks._release(tasks.LOCK_KEY, "the-next-pass")
        assert cache.get(tasks.LOCK_KEY) is None
    finally:
        cache.delete(tasks.LOCK_KEY)
