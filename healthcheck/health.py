"""Checks behind the master's /health endpoint.

Each check returns (ok, detail); the report names every failing dependency so
that `curl http://<master>:28080/health` says what to fix.
"""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import connection

from macweb import __version__


def check_database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:
        return False, f"database unavailable: {exc}".strip()[:300]
    return True, connection.vendor


def check_redis() -> tuple[bool, str]:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
        client.ping()
    except Exception as exc:
        return False, f"redis unavailable at {settings.REDIS_URL}: {exc}"[:300]
    return True, "pong"


CHECKS = {"database": check_database, "redis": check_redis}


def run_health_checks() -> dict:
    checks = {}
    failed = []
    for name, check in CHECKS.items():
        ok, detail = check()
        checks[name] = {"ok": ok, "detail": detail}
        if not ok:
            failed.append(name)
    return {
        "status": "ok" if not failed else "unhealthy",
        "failed": failed,
        "checks": checks,
        "version": __version__,
    }
