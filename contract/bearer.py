"""`Authorization: Bearer <token>`: the one way MAC writes and checks a bearer token.

The agent sends its join token this way (contract.master_api), and the master checks
three tokens the same way: the join token (inventory.api.permissions), /metrics
(MAC_METRICS_TOKEN) and /sd/... (MAC_SD_TOKEN). So all of them parse alike (the scheme
in any case, blanks around the token ignored) and compare alike (in constant time, an
unset token matching nothing). No Django here: a header is a string.
"""

from __future__ import annotations

import hmac

SCHEME = "Bearer"


def authorization(token: str) -> str:
    """The Authorization header's value that carries ``token``."""
    return f"{SCHEME} {token}"


def bearer_token(header: str) -> str | None:
    """The token of a ``Bearer <token>`` header; None for another scheme or no token."""
    scheme, _, presented = header.partition(" ")
    presented = presented.strip()
    if scheme.lower() != SCHEME.lower() or not presented:
        return None
    return presented


def token_matches(presented: str, token: str) -> bool:
    """``presented`` is ``token``, compared in constant time; False when ``token`` is empty."""
    if not token:
        return False
    return hmac.compare_digest(presented.encode(), token.encode())


def bearer_matches(header: str, token: str) -> bool:
    """The header carries ``Bearer <token>``; False when ``token`` is empty."""
    presented = bearer_token(header)
    return presented is not None and token_matches(presented, token)
