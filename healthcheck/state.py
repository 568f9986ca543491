"""What the sweep keeps in Redis: its lock, its per-interval slot, pending pushes, statistics.

Redis rather than the database because every master process (API, worker,
beat) already shares it, and because this state is disposable: losing it costs
one sweep's statistics, never inventory data.

- `running`: redis-py's Lock, held while a sweep runs, with a TTL below the probe
  interval so that a worker killed mid-sweep cannot block the next one. A sweep may
  run longer than that TTL (thousands of nodes, a slow database), so a LockHeartbeat
  thread extends it while the sweep runs. A lock with a TTL can still be lost without
  its holder noticing in time (a stalled process, a Redis restart): what keeps a sweep
  that lost it from writing is the fencing token checked inside the write's own
  transaction (healthcheck.fence), not this lock.
- `slot`: taken with SET NX PX for 80 % of the interval and never released, so
  that two beat processes started by mistake (each sending a sweep per
  interval, at different phases) still give one sweep per interval.
- `pending`: ids of nodes a sweep (or one of its chunks) changed and no finished
  sweep has pushed to the dashboard yet (healthcheck.sweep.publish).
- `queues`: the backlog of the chunk queue, sampled by every sweep, so that /health
  can name a queue that no worker consumes (healthcheck.health).

A sharded sweep (healthcheck.chunks) keeps the same lock from the task that splits
it until its chord's callback: the lock's token travels with the chunk tasks, each
chunk extends it while it runs, and the callback releases it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field

import redis
from django.conf import settings
from redis.exceptions import LockError
from redis.lock import Lock

log = logging.getLogger(__name__)


def sweep_prefix(cache_prefix: str) -> str:
    """Where a master whose cache prefix is `cache_prefix` keeps its sweep's records."""
    return f"{cache_prefix}:sweep:"


# Under this installation's prefix (the cache's, settings.CACHES), so a new master on a
# Redis that another used never reads that one's last sweep nor waits on its lock.
PREFIX = sweep_prefix(settings.CACHES["default"]["KEY_PREFIX"])
RUNNING_KEY = PREFIX + "running"
SLOT_KEY = PREFIX + "slot"
LAST, HISTORY = "last", "history"  # another master's are read by its sweep_prefix
LAST_KEY = PREFIX + LAST
HISTORY_KEY = PREFIX + HISTORY
PROBES_KEY = PREFIX + "probes_total"
COUNT_KEY = PREFIX + "count"
PENDING_KEY = PREFIX + "pending"
QUEUES_KEY = PREFIX + "queues"
HISTORY_LENGTH = 200


REDIS_POOL_SIZE = 100  # per process and timeout: redis-py's own cap, waited for, not refused
_clients: dict[tuple[str, float], redis.Redis] = {}


def get_redis(timeout: float = 5) -> redis.Redis:
    """A client of the master's Redis (settings.REDIS_URL) that gives up after `timeout` s.

    One client per URL and timeout per process: its pool keeps connections open, where a
    client per call paid a TCP connect and redis-py's handshake on every /health request.
    The pool is thread-safe and reconnects after a fork or a Redis restart. Under ASGI
    every request runs in a thread of its own, so a burst of requests can want more
    connections than the pool holds: they wait for one (up to `timeout`) rather than fail.
    """
    key = (settings.REDIS_URL, timeout)
    client = _clients.get(key)
    if client is None:
        pool = redis.BlockingConnectionPool.from_url(
            settings.REDIS_URL,
            max_connections=REDIS_POOL_SIZE,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
        client = _clients.setdefault(key, redis.Redis(connection_pool=pool))
    return client


def lock_timeout(interval: float) -> float:
    """The lock's TTL in seconds: below the interval, so a dead holder frees the next
    tick; at least 0.2 s."""
    return max(0.2, interval * 0.9)


def slot_ttl_ms(interval: float) -> int:
    return max(100, int(interval * 800))


def sweep_lock(client: redis.Redis, token: str = "") -> Lock:
    """The `running` lock, non-blocking, with the TTL of the configured interval.

    With `token`, the lock a sweep already took, as one of its chunk tasks or its chord
    callback sees it (another process): redis-py keeps the holder's token in
    `lock.local.token`, and `thread_local=False` makes that one attribute shared by the
    heartbeat thread and the task. owned(), reacquire() and release() then act only
    while Redis still holds that very token.
    """
    lock = client.lock(
        RUNNING_KEY,
        timeout=lock_timeout(settings.PROBE_INTERVAL),
        blocking=False,
        thread_local=False,
    )
    if token:
        lock.local.token = token.encode()
    return lock


def lock_token(lock: Lock) -> str:
    """The token of a lock this process acquired, to hand to the sweep's other tasks."""
    token = lock.local.token
    return token.decode() if isinstance(token, bytes) else str(token)


def release_quietly(lock: Lock) -> bool:
    """Release by token; False (logged) when the lock already expired or is another's."""
    try:
        lock.release()
    except LockError:
        log.info("sweep lock already expired or taken by another sweep; nothing to release")
        return False
    except redis.RedisError as exc:
        log.warning("could not release the sweep lock (it expires by itself): %s", exc)
        return False
    return True


class SweepLockLost(RuntimeError):
    """The sweep no longer holds the `running` lock or its fence: another sweep may run."""


class LockHeartbeat:
    """Keeps a sweep's lock extended from a thread while the sweep runs (a context manager).

    Resets the TTL (Lock.reacquire) every quarter of it, so three missed beats in a row
    still leave the lock held, and a holder that dies leaves it for at least 3/4 of
    the TTL (the visibility timeout in macweb/settings.py counts on that). It stops once
    the lock is found lost; `lost` says why. The heartbeat only keeps a live sweep's
    lock; whether the sweep may still write is decided by healthcheck.fence inside the
    write's transaction.
    """

    def __init__(self, lock: Lock) -> None:
        self.lock = lock
        self.every = max(0.05, float(lock.timeout) / 4)
        self.lost = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="sweep-lock", daemon=True)

    def __enter__(self) -> LockHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.every) and not self.lost:
            self.beat()

    def beat(self) -> None:
        try:
            self.lock.reacquire()
        except LockError:
            self.lost = "the sweep lock expired or was taken by another sweep"
            log.warning("sweep: %s", self.lost)
        except redis.RedisError as exc:
            # Redis away for a moment: try again next beat; the fence decides the write.
            log.warning("sweep: cannot extend the sweep lock: %s", exc)


def take_slot(client: redis.Redis, interval: float) -> bool:
    """True once per interval, whoever asks (see the module docstring)."""
    return bool(client.set(SLOT_KEY, str(time.time()), nx=True, px=slot_ttl_ms(interval)))


@dataclass
class SweepStats:
    """One sweep's figures: stored in Redis, shown by /health and /metrics."""

    started_at: float
    finished_at: float = 0.0
    duration: float = 0.0
    probe_duration: float = 0.0
    nodes: int = 0
    online: int = 0
    offline: int = 0
    maintenance: int = 0
    changed: int = 0
    verdicts_changed: int = 0  # nodes whose GPU verdict changed (inventory.services.health)
    went_online: int = 0
    went_offline: int = 0
    probes: int = 0
    confirmed: int = 0  # Online nodes whose failed probes were repeated before judging
    chunks: int = 1  # chunk tasks that shared the sweep (healthcheck.chunks)
    chunks_failed: int = 0  # chunk tasks that raised: their nodes wait for the next sweep
    chunk_error: str = ""  # the first failed chunk's node range and error
    outcomes: dict[str, int] = field(default_factory=dict)
    targets_rewritten: list[str] = field(default_factory=list)
    targets_error: str = ""  # why the targets files could not be written ("" when written)

    def add(self, part: dict) -> None:
        """Add the figures of one chunk (asdict of its SweepStats) to the sweep's."""
        for name in ("nodes", "changed", "went_online", "went_offline", "probes", "confirmed"):
            setattr(self, name, getattr(self, name) + part[name])
        self.verdicts_changed += part.get("verdicts_changed", 0)
        self.probe_duration = max(self.probe_duration, part["probe_duration"])
        for outcome, count in part["outcomes"].items():
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + count


def record_sweep(client: redis.Redis, stats: SweepStats) -> None:
    payload = json.dumps(asdict(stats))
    pipe = client.pipeline(transaction=True)
    pipe.set(LAST_KEY, payload)
    pipe.lpush(HISTORY_KEY, payload)
    pipe.ltrim(HISTORY_KEY, 0, HISTORY_LENGTH - 1)
    pipe.incr(COUNT_KEY)
    for outcome, count in stats.outcomes.items():
        pipe.hincrby(PROBES_KEY, outcome, count)
    pipe.execute()


def last_sweep(client: redis.Redis, prefix: str = PREFIX) -> dict | None:
    """This master's last sweep (another's, by its sweep_prefix)."""
    raw = client.get(prefix + LAST)
    return json.loads(raw) if raw else None


def sweep_history(client: redis.Redis, prefix: str = PREFIX) -> list[dict]:
    """Most recent first (another master's, by its sweep_prefix)."""
    return [json.loads(raw) for raw in client.lrange(prefix + HISTORY, 0, -1)]


def probes_total(client: redis.Redis) -> dict[str, int]:
    return {key.decode(): int(value) for key, value in client.hgetall(PROBES_KEY).items()}


def sweep_count(client: redis.Redis) -> int:
    return int(client.get(COUNT_KEY) or 0)


def record_queue_depth(client: redis.Redis, queue: str, depth: int, now: float) -> dict:
    """Keep the backlog of a chunk queue as a sweep saw it; returns the record.

    `since` is when the backlog was last seen empty or shrinking: a queue any worker
    consumes shrinks between sweeps (even expired tasks are taken off it, then
    dropped), so a backlog that has not shrunk since long before `at` has no consumer.
    """
    raw = client.hget(QUEUES_KEY, queue)
    previous = json.loads(raw) if raw else None
    since = now
    if previous and depth and depth >= previous["depth"]:
        since = previous["since"]
    record = {"depth": depth, "since": since, "at": now}
    client.hset(QUEUES_KEY, queue, json.dumps(record))
    return record


def queue_depths(client: redis.Redis) -> dict[str, dict]:
    """The last record of every chunk queue the sweeps sampled, by queue name."""
    return {name.decode(): json.loads(raw) for name, raw in client.hgetall(QUEUES_KEY).items()}
