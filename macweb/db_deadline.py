"""A deadline on every database statement, kept by the client (issue 19, defect D1).

Why: a PostgreSQL server that hangs (stopped with SIGSTOP, frozen storage, a wedged
VM) still has a kernel that accepts connections and acknowledges every packet. So
libpq's connect_timeout never fires for a connection that is already open, TCP
keepalives and TCP_USER_TIMEOUT see a healthy peer, and the server's own
statement_timeout cannot run: a request holding a pooled connection waited for as
long as the server was stopped (19 s in the fault run), then answered 200.

What: every statement Django runs on PostgreSQL goes through `deadline_wrapper`
(Django's execute_wrapper, installed on each new connection), which arms a timer.
A statement that has not returned when the timer expires gets its connection's socket
shut down: libpq's blocked read returns at once, psycopg raises OperationalError,
and macweb.db_outage answers 503 "database unavailable: ..." (or the sweep fails
and /health names `database`). The timer is the server-side statement_timeout
(MAC_DB_STATEMENT_TIMEOUT, set on each connection through libpq's options) plus a
margin: a live server always answers by then, if only with its own cancellation,
so the deadline only fires when the server does not answer at all.

COMMIT, ROLLBACK and the pool's rollback of a connection given back are not statements
of a cursor: macweb.postgresql's DatabaseWrapper runs them `under_deadline`, the same
timer.

One thread per process keeps all the timers (a statement costs a dictionary insert
and delete, no thread of its own); it looks ten times a second.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.db import DatabaseError, OperationalError

# Seconds past the server's statement_timeout before the client gives up on it.
DEADLINE_MARGIN = 1.0
TICK = 0.1


class Watchdog:
    """Timers on sockets: `arm` one per statement, `disarm` it when the statement ends."""

    def __init__(self, tick: float = TICK) -> None:
        self.tick = tick
        self._ids = itertools.count()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # Celery's prefork children

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[int, tuple[float, int]] = {}
        self._fired: set[int] = set()
        self._thread: threading.Thread | None = None

    def arm(self, fd: int, seconds: float) -> int:
        token = next(self._ids)
        with self._lock:
            self._armed[token] = (time.monotonic() + seconds, fd)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="mac-db-deadline", daemon=True
                )
                self._thread.start()
        return token

    def disarm(self, token: int) -> bool:
        """Stop the timer; True when it had fired (the socket was shut down)."""
        with self._lock:
            self._armed.pop(token, None)
            if token in self._fired:
                self._fired.discard(token)
                return True
        return False

    def _run(self) -> None:
        while True:
            time.sleep(self.tick)
            now = time.monotonic()
            with self._lock:
                # Under the lock: a statement still armed still owns its socket.
                for token, (deadline, fd) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[token]
                        self._fired.add(token)
                        _shut_down(fd)


def _shut_down(fd: int) -> None:
    """End the connection under the blocked statement; the descriptor stays libpq's."""
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: the statement has ended one way or another


WATCHDOG = Watchdog()


def statement_deadline() -> float:
    """Seconds a statement may go unanswered (0: no deadline)."""
    timeout = settings.DB_STATEMENT_TIMEOUT
    return timeout + DEADLINE_MARGIN if timeout else 0.0


def deadline_wrapper(
    execute: Callable, sql: str, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    """Django execute_wrapper: the statement answers within its deadline or fails."""
    seconds = statement_deadline()
    raw = context["connection"].connection
    if not seconds or raw is None:
        return execute(sql, params, many, context)
    token = WATCHDOG.arm(raw.fileno(), seconds)
    fired = False
    try:
        return execute(sql, params, many, context)
    except DatabaseError as exc:
        fired = WATCHDOG.disarm(token)
        if fired:
            # Dropped now, inside any atomic block: leaving it would make that block's
            # exit roll back on the dead socket, then reconnect to restore autocommit,
            # waiting out the pool's timeout on the same hung server.
            with contextlib.suppress(DatabaseError):
                context["connection"].close()
            # Chained to the driver's own error (no SQLSTATE: no server answered), as a
            # refused connection is, so that callers tell it from a deadlock or timeout.
            raise OperationalError(
                f"no answer from the database server within {seconds:g} s "
                "(MAC_DB_STATEMENT_TIMEOUT plus a margin); the connection was closed"
            ) from (exc.__cause__ or exc)
        raise
    finally:
        if not fired:
            WATCHDOG.disarm(token)


@contextlib.contextmanager
def under_deadline(connection: Any, what: str) -> Iterator[None]:
    """The same deadline for what a cursor does not run: COMMIT, ROLLBACK, the pool's reset.

    Used by macweb.postgresql's DatabaseWrapper. On expiry the socket is shut down, the
    driver's call fails at once, and the caller gets an OperationalError naming `what`.
    """
    seconds = statement_deadline()
    raw = connection.connection
    if not seconds or raw is None or raw.closed:
        yield
        return
    token = WATCHDOG.arm(raw.fileno(), seconds)
    fired = False
    try:
        yield
    except DatabaseError as exc:
        fired = WATCHDOG.disarm(token)
        if fired:
            raise OperationalError(
                f"no answer from the database server to {what} within {seconds:g} s "
                "(MAC_DB_STATEMENT_TIMEOUT plus a margin); the connection was closed"
            ) from (exc.__cause__ or exc)
        raise
    finally:
        if not fired:
            WATCHDOG.disarm(token)


def install_deadline(sender: Any, connection: Any, **kwargs: Any) -> None:
    """connection_created receiver: put the deadline on a PostgreSQL connection, once."""
    if connection.vendor != "postgresql" or not statement_deadline():
        return
    if deadline_wrapper not in connection.execute_wrappers:
        connection.execute_wrappers.append(deadline_wrapper)
