"""Checks behind the master's /health endpoint.

Each check returns (ok, detail); the report names every failing dependency so
that `curl http://<master>:28080/health` says what to fix.

The "sweeps" check says when the last fleet sweep finished and turns the
answer into a 503 when sweeps have stopped (mac-beat or mac-worker dead): no
sweep finished within STALE_INTERVALS probe intervals plus the probe timeout.
A master that has just started has not swept yet, so the same allowance is
counted from this process's start as well: /health is 200 during the first
~3 intervals after start-up, and 503 after that until a sweep finishes. A
sweep recorded before a restart therefore never makes a fresh master unhealthy,
and a master whose worker never comes up says so within about 90 s.

The "targets" check says whether the last sweep could write Prometheus' file-SD
targets: a full or read-only disk fails it with the directory and the system's
reason, while "sweeps" stays green, since the sweep itself ran.

"alertmanager" and "alert_channels" (alerting.health) only degrade the answer: the
master still probes and shows nodes without them, so /health stays 200 with
`"status": "degraded"` and names them in `degraded`, while nobody would be notified.
"""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.db import connection

from alerting.health import check_alertmanager, check_channels
from contract import __version__
from healthcheck.state import get_redis, last_sweep

PROCESS_STARTED = time.time()
STALE_INTERVALS = 3


def check_database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:
        return False, f"database unavailable: {exc}".strip()[:300]
    return True, connection.vendor


def check_redis(client: redis.Redis) -> tuple[bool, str]:
    try:
        client.ping()
    except Exception as exc:
        return False, f"redis unavailable at {settings.REDIS_URL}: {exc}"[:300]
    return True, "pong"


def check_sweeps(last: dict | None) -> tuple[bool, str]:
    """Sweeps finished recently enough (see the module docstring), given the last one."""
    now = time.time()
    allowance = STALE_INTERVALS * settings.PROBE_INTERVAL + settings.PROBE_TIMEOUT
    finished = last["finished_at"] if last else 0.0
    if now - max(finished, PROCESS_STARTED) <= allowance:
        if not last:
            return True, "no sweep yet since start-up"
        return True, (
            f"last sweep finished {now - finished:.0f} s ago in {last['duration']:.2f} s "
            f"({last['nodes']} nodes, {last['online']} online, {last['offline']} offline)"
        )
    if not last:
        return False, (
            f"no sweep has finished in the {now - PROCESS_STARTED:.0f} s since start-up: "
            "are mac-worker and mac-beat running?"
        )
    return False, (
        f"last sweep finished {now - finished:.0f} s ago (expected every "
        f"{settings.PROBE_INTERVAL:g} s): are mac-worker and mac-beat running?"
    )


def check_targets(last: dict | None) -> tuple[bool, str]:
    """Whether the last sweep could write Prometheus' targets files (a full disk...)."""
    if not last:
        return True, "no sweep yet since start-up"
    error = last.get("targets_error")
    if error:
        return False, f"{error} (Prometheus keeps scraping the previous targets)"
    return True, "written by the last sweep"


def run_health_checks() -> dict:
    client = get_redis(timeout=2)  # shared by the process; its pool keeps the connection
    redis_result = check_redis(client)
    try:
        last = last_sweep(client)
    except Exception:
        # The redis check already fails and names the cause; do not blame sweeps too.
        sweeps_result, summary = (True, "unknown while redis is unavailable"), None
        targets_result = sweeps_result
    else:
        sweeps_result, summary = check_sweeps(last), _last_sweep_summary(last)
        targets_result = check_targets(last)
    results = {
        "database": check_database(),
        "redis": redis_result,
        "sweeps": sweeps_result,
        "targets": targets_result,
    }
    failed = [name for name, (ok, _detail) in results.items() if not ok]
    optional = {"alertmanager": check_alertmanager()}
    if results["database"][0]:
        optional["alert_channels"] = check_channels()
    degraded = [name for name, (ok, _detail) in optional.items() if not ok]
    results.update(optional)
    checks = {name: {"ok": ok, "detail": detail} for name, (ok, detail) in results.items()}
    status = "unhealthy" if failed else "degraded" if degraded else "ok"
    return {
        "status": status,
        "failed": failed,
        "degraded": degraded,
        "checks": checks,
        "version": __version__,
        "last_sweep": summary,
    }


def _last_sweep_summary(last: dict | None) -> dict | None:
    """When the last sweep finished and how long it took (None when unknown)."""
    if not last:
        return None
    return {
        "finished_at": last["finished_at"],
        "duration_seconds": round(last["duration"], 3),
        "nodes": last["nodes"],
        "online": last["online"],
        "offline": last["offline"],
    }
