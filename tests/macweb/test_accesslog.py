"""macweb.accesslog: the reset link's token out of access-log records."""

from __future__ import annotations

import logging

from macweb.accesslog import HideResetTokens, hide_in_access_logs, hide_reset_tokens


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


def test_installing_it_twice_adds_one_filter():
    loggers = [logging.getLogger(name) for name in ("uvicorn.access", "django.request")]
    before = [list(logger.filters) for logger in loggers]
    try:
        hide_in_access_logs()
        hide_in_access_logs()
        for logger in loggers:
            assert sum(isinstance(f, HideResetTokens) for f in logger.filters) == 1, logger
    finally:
        for logger, filters in zip(loggers, before, strict=True):
            logger.filters = filters
