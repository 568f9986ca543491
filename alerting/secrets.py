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
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
    except ValueError:  # an unbalanced [ in the host
        return f"?/{HIDDEN}"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        # A port urllib refuses (above 65535) on a row saved before channel_errors did:
        # shown as written, so that the row can be told apart and fixed; never raised,
        # or every listing, save and poll that shows or scrubs it would fail.
        written = parts.netloc.rpartition("@")[2].rpartition(":")[2]
        port = f":{written}" if written.isdigit() else ":?"
    return f"{parts.scheme}://{host}{port}/{HIDDEN}"


def go_quoted(text: str) -> str:
    """`text` as Go's %q writes it inside the quotes (strconv.Quote): how amtool and
    Alertmanager quote a URL they refuse."""
    out = []
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return "".join(out)


_GO_ESCAPES = {
    "\\": "\\\\", '"': '\\"', "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n",
    "\r": "\\r", "\t": "\\t", "\v": "\\v",
}  # fmt: skip


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
        hint = url_hint(channel.url)
        secrets = [
            (channel.url, hint),
            (channel.smtp_password, HIDDEN),
            (channel.smtp_user, HIDDEN),
        ]
        try:
            parts = urlsplit(channel.url or "")
        except ValueError:  # no parts to tell apart: the whole URL is still replaced
            parts = None
        if parts is not None:
            secrets += [
                # the parts after the host, should the complaint quote only them
                (parts.path + (f"?{parts.query}" if parts.query else ""), f"/{HIDDEN}"),
                (parts.netloc, urlsplit(hint).netloc),
            ]
        # Go's %q escapes " and \ and control characters: the quoted forms as well.
        secrets += [(go_quoted(secret), shown) for secret, shown in secrets if secret]
        for secret, shown in sorted(secrets, key=lambda pair: -len(pair[0] or "")):
            if secret and len(secret) > 3 and secret != shown:
                text = text.replace(secret, shown)
    return text
