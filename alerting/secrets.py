"""Write-only secrets: what the admin and the API show instead of a stored secret.

A webhook URL often is the credential (Slack's carries its token in the path), and
the SMTP password is one: neither is ever rendered back. People see whether one is
set, and for a URL its scheme and host, enough to tell channels apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol
from urllib.parse import urlsplit

HIDDEN = "\u2022\u2022\u2022\u2022"


def url_hint(url: str) -> str:
    """`https://hooks.slack.com/••••` for a stored URL; "" when none is stored."""
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/{HIDDEN}"


def keep_if_empty(new: str | None, old: str) -> str:
    """An empty field on edit keeps the stored secret."""
    return new if new else old


class HoldsSecrets(Protocol):
    url: str
    smtp_user: str
    smtp_password: str


def scrub(text: str, channels: Iterable[HoldsSecrets]) -> str:
    """`text` (amtool's or Alertmanager's complaint) with every channel's secrets in it
    replaced as the admin shows them: Go's URL parser quotes the whole URL it refuses,
    a Slack token or a password included."""
    for channel in channels:
        parts = urlsplit(channel.url or "")
        secrets = [
            (channel.url, url_hint(channel.url)),
            # the parts after the host, should the complaint quote only them
            (parts.path + (f"?{parts.query}" if parts.query else ""), f"/{HIDDEN}"),
            (parts.netloc, urlsplit(url_hint(channel.url)).netloc),
            (channel.smtp_password, HIDDEN),
            (channel.smtp_user, HIDDEN),
        ]
        for secret, shown in sorted(secrets, key=lambda pair: -len(pair[0] or "")):
            if secret and len(secret) > 3 and secret != shown:
                text = text.replace(secret, shown)
    return text
