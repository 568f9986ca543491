"""Rate limits of the agent endpoints that only the API can apply: per node key.

The flood case, many requests from one address, is the proxy's: nginx's `limit_req`
per client address on /api/v1/register and /api/v1/deregister (macweb.nginxconf,
MAC_REGISTER_RATE). What nginx cannot see is which node a request speaks for: that is
the node key header, counted here with DRF's own SimpleRateThrottle in the cache.
DRF reads, appends and writes back a request history, so requests that arrive at the
same moment can both pass: a little inexact, as healthchecks' token bucket is, and
safe for a limit that only stops one node from flooding its history.
"""

from __future__ import annotations

import hashlib
import logging
import math

from django.conf import settings
from rest_framework.exceptions import Throttled
from rest_framework.throttling import SimpleRateThrottle

from contract.services import NODE_KEY_HEADER

log = logging.getLogger(__name__)

NODE_EVENT_RATE = "30/min"  # per node: a reset a second for half a minute, then 429s


class NodeKeyRateThrottle(SimpleRateThrottle):
    """`rate` per node key (hashed: the cache never holds a key); no key, no count."""

    scope = "register"

    def get_rate(self) -> str:
        # DRF makes a throttle per request and asks this each time: a changed setting
        # (and tests) take effect at once.
        return settings.REGISTER_RATE

    def get_cache_key(self, request, view) -> str | None:
        key = request.headers.get(NODE_KEY_HEADER)
        if not key:
            return None
        ident = hashlib.sha256(key.encode()).hexdigest()[:32]
        return self.cache_format % {"scope": self.scope, "ident": ident}

    # Names the limit and its setting in the 429's detail.
    setting = "MAC_REGISTER_RATE"

    def allow_request(self, request, view) -> bool:
        try:
            allowed = super().allow_request(request, view)
        except Exception:
            # Redis down: an agent must keep working; /health reports Redis itself.
            log.warning("rate limit of %s not applied: the cache is unavailable", self.scope)
            return True
        if allowed:
            return True
        wait = math.ceil(self.wait() or self.duration)
        raise Throttled(
            wait=wait,
            detail=f"Too many requests with this {NODE_KEY_HEADER}: the limit is {self.rate} "
            f"per node ({self.setting}); retry in {wait} s.",
        )


class DeregisterRateThrottle(NodeKeyRateThrottle):
    """The same rate for deregistrations, counted apart (as nginx counts them apart)."""

    scope = "deregister"


class NodeEventRateThrottle(NodeKeyRateThrottle):
    """NODE_EVENT_RATE per node key on /api/v1/nodes/self/events."""

    scope = "node_events"
    setting = "NODE_EVENT_RATE, fixed"

    def get_rate(self) -> str:
        return NODE_EVENT_RATE
