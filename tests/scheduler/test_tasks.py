"""The Slurm tasks' locks (scheduler.tasks): redis-py's Lock for the drain pass and the job
read alike, one run at a time; a run frees only its own; no Redis, no run (and no
traceback). The drain pass's renewal is in test_drain_lock.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

import pytest
import redis
from django.core.cache import cache

from scheduler import tasks
from scheduler.jobread import ReadResult
from testkit.ports import free_port


@pytest.fixture
def server(settings, tmp_path) -> Iterator[redis.Redis]:
    """The master's Redis, no job-read lock in it, and a slurm.conf for the read to find."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\n")
    settings.SLURM_CONF = conf
    client = redis.Redis.from_url(settings.REDIS_URL)
    cache.delete(tasks.JOBS_LOCK_KEY)
    try:
        yield client
    finally:
        cache.delete(tasks.JOBS_LOCK_KEY)
        client.close()


@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """The reads of Slurm that ran (none talks to Slurm)."""
    ran: list[int] = []

    def read_jobs(client) -> ReadResult:
        ran.append(1)
        return ReadResult()

    monkeypatch.setattr(tasks, "read_jobs", read_jobs)
    monkeypatch.setattr(tasks, "slurm_client", lambda: None)
    return ran


def test_a_second_read_does_not_start_while_another_holds_the_lock(server, reads):
    other = server.lock(cache.make_key(tasks.JOBS_LOCK_KEY), timeout=60)  # a read running
    assert other.acquire(blocking=False)

    assert tasks.read_slurm_jobs() == {"ran": False, "reason": "another read is running"}
    assert not reads and other.owned()

    other.release()
    assert tasks.read_slurm_jobs() == {"ran": True, **asdict(ReadResult())}
    assert reads == [1]
    assert not server.exists(cache.make_key(tasks.JOBS_LOCK_KEY))  # freed for the next


def test_a_read_that_outlived_its_lock_leaves_the_next_reads_lock_alone(server, reads, monkeypatch):
    key = cache.make_key(tasks.JOBS_LOCK_KEY)
    nxt = server.lock(key, timeout=60)

    def a_long_read(client) -> ReadResult:
        server.delete(key)  # past LOCK_SECONDS: it expired...
        assert nxt.acquire(blocking=False)  # ...and the next read took it
        return ReadResult()

    monkeypatch.setattr(tasks, "read_jobs", a_long_read)
    assert tasks.read_slurm_jobs()["ran"]
    assert nxt.owned()  # the next read's lock, left to it
    nxt.release()


def test_without_redis_neither_task_runs_and_each_says_why(settings, tmp_path, reads, caplog):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\n")
    settings.SLURM_CONF = conf
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/5"  # nothing listens

    read = tasks.read_slurm_jobs()
    assert not read["ran"] and read["reason"].startswith("Redis: ") and not reads
    passed = tasks.drain_nodes()
    assert not passed["ran"] and passed["reason"].startswith("Redis: ")
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("job attribution: not run, its lock cannot") for m in said)
    assert any(m.startswith("drain: not run, its lock cannot") for m in said)
