"""Rate limit of the agent endpoints, per source address, counted atomically in Redis.

DRF's SimpleRateThrottle reads a request history, appends and writes it back: two
requests that read at once both pass, and a parallel flood got hundreds past a
600/min limit (issue 11). Here each request is one Redis script on a fixed window
(INCR, EXPIRE on the window's first hit, TTL), which Redis runs atomically: Redis
counts, so never more than the limit pass in a window, however many workers and
threads ask at once.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, BaseCache, caches
from rest_framework.throttling import BaseThrottle

from inventory.addresses import source_address

log = logging.getLogger(__name__)

_caches: dict[str, BaseCache] = {}


def shared_cache() -> BaseCache:
    """The default cache, one instance for all of the process's threads.

    Django keeps a cache per thread, and under ASGI every request runs in a thread of its
    own: each request built a Redis pool, connected and shook hands, and threw it away.
    RedisCache's pool is thread-safe, so one instance reuses its connections. Keyed by the
    settings so that a changed CACHES (tests) takes effect.
    """
    config = repr(settings.CACHES[DEFAULT_CACHE_ALIAS])
    cache = _caches.get(config)
    if cache is None:
        cache = _caches.setdefault(config, caches.create_connection(DEFAULT_CACHE_ALIAS))
    return cache


_clients: dict[int, object] = {}


def _client(cache: BaseCache):
    """RedisCache's own client (its pool, its settings); Django has no public
    INCR-with-TTL. Kept per cache: RedisCache builds a client object on every call."""
    client = _clients.get(id(cache))
    if client is None:
        client = _clients.setdefault(id(cache), cache._cache.get_client(write=True))
    return client


_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """DRF's rate format, "<count>/<s|sec|m|min|h|hour|d|day>", as (count, seconds);
    inventory.checks has already refused any other form at start-up."""
    count, _, period = rate.partition("/")
    return int(count), _PERIODS[period.strip()[0]]


# One EVALSHA instead of a MULTI/EXEC transaction of three commands: the same
# atomicity, a fifth of the replies to parse (about 4% of a registration's CPU at
# 1,000 at once, docs/benchmarks.md). A key left without a TTL gets the window's.
_COUNT_SCRIPT = """
local hits = redis.call('INCR', KEYS[1])
local ttl = redis.call('TTL', KEYS[1])
if ttl < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {hits, ttl}
"""
_scripts: dict[int, object] = {}


def count_in_window(cache: BaseCache, key: str, window: int) -> tuple[int, int]:
    """Add one to `key`'s fixed window; returns (hits so far, seconds the window has left)."""
    full_key = cache.make_and_validate_key(key)
    client = _client(cache)
    script = _scripts.get(id(client))
    if script is None:
        # redis-py's Script sends EVALSHA and loads the script once when Redis lacks it.
        script = _scripts.setdefault(id(client), client.register_script(_COUNT_SCRIPT))
    hits, ttl = script(keys=[full_key], args=[window])
    return int(hits), max(int(ttl), 0)


class RegisterRateThrottle(BaseThrottle):
    """settings.REGISTER_RATE (MAC_REGISTER_RATE, e.g. "600/min") per source address."""

    scope = "register"

    def __init__(self) -> None:
        self._wait: float | None = None

    def allow_request(self, request, view) -> bool:
        # Read per request so that a changed setting (and tests) take effect at once.
        limit, window = parse_rate(settings.REGISTER_RATE)
        ident = source_address(request.META) or "unknown"
        try:
            hits, left = count_in_window(
                shared_cache(), f"throttle_{self.scope}_{ident}", int(window)
            )
        except Exception:
            # Redis down: registering must keep working; /health reports Redis itself.
            log.warning("rate limit not applied: the cache is unavailable", exc_info=True)
            return True
        if hits <= limit:
            return True
        self._wait = left or window
        return False

    def wait(self) -> float | None:
        return self._wait


class DeregisterRateThrottle(RegisterRateThrottle):
    """The same limit, counted apart: `mac stop agent` across a rack is not a flood."""

    scope = "deregister"
