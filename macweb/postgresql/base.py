"""Django's PostgreSQL backend, with COMMIT, ROLLBACK and the pool's reset under a deadline.

Why: macweb.db_deadline bounds every statement through Django's execute_wrapper, but
a transaction's COMMIT, its ROLLBACK and the rollback the connection pool runs on a
connection given back inside a transaction go straight to the driver, not through a
cursor. A server frozen between the last statement and COMMIT held the request's thread
as long as the freeze (issue 26). Subclassing the built-in backend and wrapping its
public commit(), rollback() and close() is Django's documented way to add such
behaviour ("Subclassing the built-in database backends"); settings.DATABASES selects
it wherever the URL says PostgreSQL.
"""

from __future__ import annotations

from django.db.backends.postgresql import base

from macweb.db_deadline import under_deadline


class DatabaseWrapper(base.DatabaseWrapper):
    def commit(self) -> None:
        with under_deadline(self, "COMMIT"):
            super().commit()

    def rollback(self) -> None:
        with under_deadline(self, "ROLLBACK"):
            super().rollback()

    def close(self) -> None:
        # Given back to the pool inside a transaction, a connection is rolled back there.
        with under_deadline(self, "the rollback of a connection given back to the pool"):
            super().close()
