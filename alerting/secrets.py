"""Write-only secrets: what the admin and the API show instead of a stored secret.

A webhook URL often is the credential (Slack's carries its token in the path), and
the SMTP password is one: neither is ever rendered back. People see whether one is
set, and for a URL its scheme and host, enough to tell channels apart.
"""

from __future__ import annotations

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
