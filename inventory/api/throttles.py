"""Rate limit of the agent endpoints, per source address, counted in the Redis cache."""

from __future__ import annotations

import logging

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from inventory.addresses import source_address

log = logging.getLogger(__name__)


class RegisterRateThrottle(SimpleRateThrottle):
    """settings.REGISTER_RATE (MAC_REGISTER_RATE, e.g. "600/min") per source address."""

    scope = "register"

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
