"""Log lines without the secret that a password-reset link carries.

Django's reset link is /accounts/reset/<uid>/<token>/, and anyone who reads the token
before it is used can set that user's password: the API server's log must not keep it.
uvicorn writes each request's path, Django each failed request's (django.request), and
MAC's database-outage answer its own: the token is replaced by HIDDEN in all three; the
uid stays, so a line still says whose link was followed. nginx's access log, of the
requests it answers itself, hides it the same way ($mac_logged_request in
macweb/nginxconf.py). Its error log cannot be filtered, and names the request whole
(the API server down, a limit hit): reset links have a location of their own there
that writes no error lines.
"""

from __future__ import annotations

import logging
import re

from contract.redact import HIDDEN

# The token segment; Django's next step, .../<uid>/set-password/, holds no secret.
_RESET_TOKEN = re.compile(r"(/accounts/reset/[^/?#\s]+/)(?!set-password/)[^/?#\s]+")


def hide_reset_tokens(text: str) -> str:
    """`text` with every reset link's token replaced by HIDDEN."""
    return _RESET_TOKEN.sub(rf"\g<1>{HIDDEN}", text)


class HideResetTokens(logging.Filter):
    """A filter for an access logger: the record's message and arguments rewritten."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = hide_reset_tokens(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                hide_reset_tokens(arg) if isinstance(arg, str) else arg for arg in record.args
            )
        return True


class ClientWithoutPortZero(logging.Filter):
    """uvicorn's access line names the client as host:port; behind nginx the host comes
    from X-Forwarded-For, which has no port, and uvicorn writes 0 for it. "10.0.0.7:0"
    reads like a port someone chose: the line says "10.0.0.7" (the agent's address, what
    `mac logs api-server | grep /api/v1/register` is read for)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            client = record.args[0]
            if isinstance(client, str) and client.endswith(":0"):
                record.args = (client.removesuffix(":0"), *record.args[1:])
        return True


def filter_access_logs() -> None:
    """Install the filters on the loggers that write request paths: uvicorn's access log
    (gunicorn's uvicorn worker writes it, not gunicorn's own) and Django's failed
    requests; each once."""
    for name, filters in (
        ("uvicorn.access", (HideResetTokens, ClientWithoutPortZero)),
        ("django.request", (HideResetTokens,)),
    ):
        logger = logging.getLogger(name)
        for kind in filters:
            if not any(isinstance(f, kind) for f in logger.filters):
                logger.addFilter(kind())
