"""Writes that several writers of the same node rows may make at once, repeated when the
database gives one of them up.

The sweep writes a chunk's nodes (status, last_seen, verdicts) in one transaction, in
whatever order PostgreSQL's UPDATE ... WHERE id IN (...) reaches the rows; an admin's
action on several nodes (maintenance, a forget of fault history) locks them in id
order. Two such transactions can each hold a row the other wants: PostgreSQL then
aborts one of them (a deadlock, SQLSTATE 40P01), and SQLite may answer "database is
locked" under the same contention. Each is safe to run again from the start: it reads
what it writes anew. A database that cannot be reached is no contention: that error
goes out at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, transaction

T = TypeVar("T")
ATTEMPTS = 4
log = logging.getLogger(__name__)


def unreachable(exc: OperationalError) -> bool:
    """No server answered (refused, timed out, no pooled connection): psycopg reports
    those without an SQLSTATE, unlike a deadlock (40P01) or a serialization failure."""
    cause = exc.__cause__
    return cause is not None and hasattr(cause, "sqlstate") and cause.sqlstate is None


def atomic_again(work: Callable[[], T], what: str, attempts: int = ATTEMPTS) -> T:
    """`work()` in a transaction; run again, after a short pause, when the database gave
    it up for contention (module docstring)."""
    for attempt in range(1, attempts + 1):
        try:
            with transaction.atomic():
                return work()
        except OperationalError as exc:
            if (
                attempt == attempts
                or unreachable(exc)
                or transaction.get_connection().in_atomic_block
            ):
                raise  # inside a caller's transaction, the caller's whole work is lost
            log.info("%s gave way to another writer (attempt %d): %s", what, attempt, exc)
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")  # the loop returns or raises
