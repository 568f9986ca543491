"""URLs and messages with the credentials taken out: what MAC may show to anyone.

The master's settings carry passwords inside URLs (`redis://:<password>@host:6379/0`,
an Alertmanager behind basic auth), and a message that names such a URL must not name
its password: /health answers anyone who reaches the front door, and logs travel.
No Django here: the master and the `mac` command both print URLs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

UNREADABLE = "<a URL that cannot be read>"
HIDDEN = "<hidden>"
# scheme://user:password@ inside any text: the part before "@" goes.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/@'\"<>]*@")
# A credential passed as a query parameter (redis-py takes ?password=...).
_SECRET_PARAMETER = re.compile(
    r"(?P<name>[?&;](?:password|passwd|pass|token|secret|auth|key)=)[^&\s'\"<>]*", re.IGNORECASE
)
# Shorter secrets are not looked for in free text: they would blank out ordinary words.
MIN_SECRET_LENGTH = 4


def url_without_credentials(url: str) -> str:
    """`url` as scheme://host[:port]/path: no user, password, query or fragment."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return UNREADABLE
    if parts.scheme and not host and parts.path.startswith("/"):
        return f"{parts.scheme}://{parts.path}"  # a socket file: unix:///run/redis.sock
    if not parts.scheme or not host:
        return UNREADABLE
    shown = f"[{host}]" if ":" in host else host
    if port is not None:
        shown += f":{port}"
    return f"{parts.scheme}://{shown}{parts.path}"


def url_secrets(url: str) -> list[str]:
    """The user name's password and any credential query parameter in `url`."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return []
    found = [password] if password else []
    for match in _SECRET_PARAMETER.finditer(f"?{parts.query}"):
        found.append(match.group(0).split("=", 1)[1])
    # Both spellings: a message may show the value as written or as decoded.
    return [form for secret in found if secret for form in dict.fromkeys((secret, unquote(secret)))]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the credentials of every URL in it, and each of `secrets`, hidden."""
    text = _USERINFO.sub(r"\g<scheme>", text)
    text = _SECRET_PARAMETER.sub(rf"\g<name>{HIDDEN}", text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= MIN_SECRET_LENGTH:
            text = text.replace(secret, HIDDEN)
    return text
