"""What the sweep keeps in Redis: its lock, its per-interval slot, and its statistics.

Redis rather than the database because every master process (API, worker,
beat) already shares it, and because this state is disposable: losing it costs
one sweep's statistics, never inventory data.

Two keys keep sweeps from piling up:
- `running`: a lock (SET NX PX) held while a sweep runs, released only by the
  token that took it, with a TTL below the probe interval so that a worker
  killed mid-sweep cannot block the next one. A sweep may well run longer than
  that TTL (thousands of nodes, a slow database), so a LockHeartbeat thread
  extends it every third of the TTL for as long as the sweep runs; and the sweep
  checks the lock is still its own before it writes (fencing), so a sweep that
  lost it (Redis restarted, the heartbeat starved) never writes over a newer one;
- `slot`: taken with SET NX PX for 80 % of the interval and never released, so
  that two beat processes started by mistake (each sending a sweep per
  interval, at different phases) still give one sweep per interval.

A sharded sweep (healthcheck.chunks) keeps the same lock from the task that splits
it until the task that finishes it: its token is the sweep's id, every chunk task
extends it while it runs and checks it before writing.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field

import redis
from django.conf import settings

log = logging.getLogger(__name__)

PREFIX = "mac:sweep:"
RUNNING_KEY = PREFIX + "running"
SLOT_KEY = PREFIX + "slot"
LAST_KEY = PREFIX + "last"
HISTORY_KEY = PREFIX + "history"
PROBES_KEY = PREFIX + "probes_total"
COUNT_KEY = PREFIX + "count"
HISTORY_LENGTH = 200

# Compare-and-delete / compare-and-extend: only the holder's token may touch the lock.
_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)
_EXTEND = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
)


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


def lock_ttl_ms(interval: float) -> int:
    """Below the interval, so a dead holder frees the next tick; at least 200 ms."""
    return max(200, int(interval * 900))


def slot_ttl_ms(interval: float) -> int:
    return max(100, int(interval * 800))


class SweepLock:
    """The `running` lock: SET NX PX with a random token, released by token."""

    def __init__(
        self, client: redis.Redis, ttl_ms: int, key: str = RUNNING_KEY, token: str = ""
    ) -> None:
        self.client = client
        self.ttl_ms = ttl_ms
        self.key = key
        self.token = token or secrets.token_hex(16)
        self.held = False

    @classmethod
    def resume(cls, client: redis.Redis, ttl_ms: int, token: str) -> SweepLock:
        """The lock a sharded sweep took, as seen by one of its chunk or finishing tasks.

        It is treated as held; extend() then says whether it still is (the token is
        still the one in Redis), which is the fence of a task that may run late.
        """
        lock = cls(client, ttl_ms, token=token)
        lock.held = True
        return lock

    def acquire(self) -> bool:
        self.held = bool(self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))
        return self.held

    def extend(self) -> bool:
        """Push the expiry out again (between steps of a long sweep)."""
        if not self.held:
            return False
        return bool(self.client.eval(_EXTEND, 1, self.key, self.token, self.ttl_ms))

    def release(self) -> bool:
        if not self.held:
            return False
        self.held = False
        return bool(self.client.eval(_RELEASE, 1, self.key, self.token))


class SweepLockLost(RuntimeError):
    """The sweep no longer holds the `running` lock: another sweep may be running."""


class LockHeartbeat:
    """Keeps a SweepLock extended from a thread while the sweep runs (a context manager).

    Extends every third of the TTL, so two missed beats in a row still leave the lock
    held. `check()` is the fence before the inventory write: it raises SweepLockLost once
    an extension found the lock gone or taken by another token, or could not reach Redis
    for longer than the TTL.
    """

    def __init__(self, lock: SweepLock) -> None:
        self.lock = lock
        self.every = max(0.05, lock.ttl_ms / 3000)
        self.lost = ""
        self._fenced = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="sweep-lock", daemon=True)
        self._confirmed = time.monotonic()

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
            held = self.lock.extend()
        except redis.RedisError as exc:
            if time.monotonic() - self._confirmed > self.lock.ttl_ms / 1000:
                self.lost = f"cannot extend the sweep lock: {exc}"
            return
        if held:
            self._confirmed = time.monotonic()
        else:
            self.lost = "the sweep lock expired or was taken by another sweep"
            log.warning("sweep: %s", self.lost)

    def check(self) -> None:
        """run_sweep's on_step. Its first call comes after the probes and before the
        inventory write: there it is the fence, raising SweepLockLost unless the lock is
        still ours. Later calls come after that write: the sweep then finishes (targets,
        dashboard push, statistics) so that what it saved is also shown."""
        if self._fenced:
            return
        self._fenced = True
        if not self.lost:
            self.beat()
        if self.lost:
            raise SweepLockLost(self.lost)


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
    went_online: int = 0
    went_offline: int = 0
    probes: int = 0
    confirmed: int = 0  # Online nodes whose failed probes were repeated before judging
    chunks: int = 1  # chunk tasks that shared the sweep (healthcheck.chunks)
    outcomes: dict[str, int] = field(default_factory=dict)
    targets_rewritten: list[str] = field(default_factory=list)
    targets_error: str = ""  # why the targets files could not be written ("" when written)


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


def last_sweep(client: redis.Redis) -> dict | None:
    raw = client.get(LAST_KEY)
    return json.loads(raw) if raw else None


def sweep_history(client: redis.Redis) -> list[dict]:
    """Most recent first."""
    return [json.loads(raw) for raw in client.lrange(HISTORY_KEY, 0, -1)]


def probes_total(client: redis.Redis) -> dict[str, int]:
    return {key.decode(): int(value) for key, value in client.hgetall(PROBES_KEY).items()}


def sweep_count(client: redis.Redis) -> int:
    return int(client.get(COUNT_KEY) or 0)
