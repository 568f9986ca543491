"""macweb.accesslog: the reset link's token, and the proxy's port 0, out of access-log records."""

from __future__ import annotations

import logging

from macweb.accesslog import (
    ClientWithoutPortZero,
    HideResetTokens,
    filter_access_logs,
    hide_reset_tokens,
)


def test_only_the_token_of_a_reset_link_is_hidden():
    assert hide_reset_tokens("/accounts/reset/MQ/cb5w0g-9f1c2d/") == "/accounts/reset/MQ/<hidden>/"
    assert hide_reset_tokens("/accounts/reset/MQ/tok?x=1") == "/accounts/reset/MQ/<hidden>?x=1"
    # Django's next step holds no secret, and other paths are left as they are.
    next_step = "/accounts/reset/MQ/set-password/"
    assert hide_reset_tokens(next_step) == next_step
    assert hide_reset_tokens("/accounts/reset/done/") == "/accounts/reset/done/"
    assert hide_reset_tokens("/api/v1/register") == "/api/v1/register"


def test_the_filter_rewrites_uvicorns_record_arguments():
    # uvicorn's access line: '%s - "%s %s HTTP/%s" %d' with the path as the third argument.
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/accounts/reset/MQ/cb5w0g-9f1c2d/", "1.1", 200), None,
    )  # fmt: skip
    assert HideResetTokens().filter(record) is True
    assert record.getMessage() == '127.0.0.1:5000 - "GET /accounts/reset/MQ/<hidden>/ HTTP/1.1" 200'


def _line(client: str) -> logging.LogRecord:
    return logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        (client, "POST", "/api/v1/register", "1.1", 201), None,
    )  # fmt: skip


def test_the_port_zero_of_a_forwarded_client_is_left_out():
    """Behind nginx uvicorn takes the client from X-Forwarded-For, with port 0."""
    for client, shown in (
        ("10.0.0.7:0", "10.0.0.7"),
        ("2001:db8::7:0", "2001:db8::7"),  # uvicorn writes IPv6 unbracketed
        ("10.0.0.7:5000", "10.0.0.7:5000"),  # a real port stays
        ("10.0.0.70", "10.0.0.70"),
    ):
        record = _line(client)
        assert ClientWithoutPortZero().filter(record) is True
        assert record.getMessage() == f'{shown} - "POST /api/v1/register HTTP/1.1" 201'


def test_installing_them_twice_adds_each_filter_once():
    loggers = [logging.getLogger(name) for name in ("uvicorn.access", "django.request")]
    before = [list(logger.filters) for logger in loggers]
    try:
        filter_access_logs()
        filter_access_logs()
        access, failed = loggers
        for kind in (HideResetTokens, ClientWithoutPortZero):
            assert sum(isinstance(f, kind) for f in access.filters) == 1
        assert sum(isinstance(f, HideResetTokens) for f in failed.filters) == 1
        assert not any(isinstance(f, ClientWithoutPortZero) for f in failed.filters)
    finally:
        for logger, filters in zip(loggers, before, strict=True):
            logger.filters = filters
