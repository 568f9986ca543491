"""The one check of `Authorization: Bearer <token>` for the endpoints Prometheus calls.

`/metrics` (MAC_METRICS_TOKEN) and `/sd/...` (MAC_SD_TOKEN) both use it, so both compare
the same way: scheme in any case, the token in constant time, an unset token matching
nothing.
"""

from __future__ import annotations

import hmac

from django.http import HttpRequest


def bearer_matches(request: HttpRequest, token: str) -> bool:
    """The request carries `Authorization: Bearer <token>`; False when `token` is empty."""
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())
