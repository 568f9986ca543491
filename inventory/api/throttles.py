"""Rate limit of the agent endpoints, per source address, counted in the Redis cache."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, BaseCache, caches
from rest_framework.throttling import SimpleRateThrottle

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


class RegisterRateThrottle(SimpleRateThrottle):
    """settings.REGISTER_RATE (MAC_REGISTER_RATE, e.g. "600/min") per source address."""

    scope = "register"

    def __init__(self) -> None:
        self.cache = shared_cache()
        super().__init__()

    def get_rate(self) -> str:
        # Read per request so that a changed setting (and tests) take effect at once.
        return settings.REGISTER_RATE

    def get_cache_key(self, request, view) -> str:
        ident = source_address(request.META) or "unknown"
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except Exception:
            # Redis down: registering must keep working; /health reports Redis itself.
            log.warning("rate limit not applied: the cache is unavailable", exc_info=True)
            return True


class DeregisterRateThrottle(RegisterRateThrottle):
    scope = "deregister"
