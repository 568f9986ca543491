"""A throwaway PostgreSQL database and Redis state for a benchmark run.

`bench_database()` creates a database of its own on the PostgreSQL server that
MAC_BENCH_DATABASE_URL or DATABASE_URL names (or the local default), points Django
at it with a throwaway secret key, prepares and migrates it, and drops it on the way
out, so nothing is left behind and the tests' databases are never touched.
`sweep_state_cleared()` removes the sweep's Redis keys (lock, slot, statistics)
afterwards, so one benchmark's sweeps never hold the next one's lock.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

import dj_database_url

DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432/postgres"


@contextlib.contextmanager
def bench_database(prefix: str) -> Iterator[str]:
    """Create, migrate and finally drop a database; yields its DATABASE_URL.

    Must run before Django is set up: the URL goes into the environment first.
    """
    import psycopg

    given = os.environ.get("MAC_BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL")
    server = dj_database_url.parse(given or DEFAULT_SERVER)
    name = f"{prefix}_{os.getpid()}"
    admin = {
        "host": server["HOST"] or "127.0.0.1",
        "port": server["PORT"] or 5432,
        "user": server["USER"] or "postgres",
        "password": server["PASSWORD"] or None,
        "dbname": "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    auth = admin["user"] + (f":{admin['password']}" if admin["password"] else "")
    url = f"postgres://{auth}@{admin['host']}:{admin['port']}/{name}"
    os.environ["DATABASE_URL"] = url
    os.environ.pop("MAC_TEST_DB_NAME", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")
    # A throwaway key for a throwaway database, shared with the servers the benchmark
    # starts through their environment (the settings never make one up).
    os.environ.setdefault("MAC_SECRET_KEY", secrets.token_urlsafe(50))
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("prepare_master", verbosity=0)
        call_command("migrate", verbosity=0)
        yield url
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(**admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def sweep_state_cleared(*keys: str) -> Iterator[None]:
    """On the way out, delete the sweep's Redis keys (and `keys`) in MAC_REDIS_URL's db."""
    try:
        yield
    finally:
        import redis

        client = redis.Redis.from_url(os.environ["MAC_REDIS_URL"])
        # every installation's (healthcheck.state.PREFIX): the bench's masters each had one
        for key in client.scan_iter(match="*:sweep:*"):
            client.delete(key)
        if keys:
            client.delete(*keys)
