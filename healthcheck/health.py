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

"alertmanager", "alert_channels" and "node_alerts" (alerting.health) only degrade the answer: the
master still probes and shows nodes without them, so /health stays 200 with
`"status": "degraded"` and names them in `degraded`, while nobody would be notified.

The "queues" check names a chunk queue (MAC_PROBE_QUEUE) that no worker consumes:
every sweep samples its backlog (healthcheck.tasks.sample_chunk_queue), and a backlog
that has not shrunk for STUCK_INTERVALS intervals has no consumer, since a consumer
takes even expired tasks off the queue. Sweeps then stop finishing too; the "sweeps"
check says so without blaming mac-worker and mac-beat, which both run. Reading the
sample costs /health one Redis command, never a broadcast to the workers.
"""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.db import connection

from alerting.health import check_alertmanager, check_channels, check_node_alert_posts
from contract import __version__
from healthcheck.state import get_redis, last_sweep, queue_depths

PROCESS_STARTED = time.time()
STALE_INTERVALS = 3
STUCK_INTERVALS = 2


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


def check_sweeps(last: dict | None, stuck: str = "") -> tuple[bool, str]:
    """Sweeps finished recently enough (see the module docstring), given the last one.

    `stuck` names the chunk queue nobody consumes (check_queues), the cause to give
    instead of a stopped worker or beat."""
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
    cause = (
        f"its chunk tasks wait in {stuck}, which no worker consumes (see queues)"
        if stuck
        else "are mac-worker and mac-beat running?"
    )
    if not last:
        return False, (
            f"no sweep has finished in the {now - PROCESS_STARTED:.0f} s since start-up: {cause}"
        )
    return False, (
        f"last sweep finished {now - finished:.0f} s ago (expected every "
        f"{settings.PROBE_INTERVAL:g} s): {cause}"
    )


def stuck_queues(queues: dict[str, dict]) -> list[str]:
    """Chunk queues whose backlog, sampled recently, has not shrunk for STUCK_INTERVALS."""
    now, interval = time.time(), settings.PROBE_INTERVAL
    recent = STALE_INTERVALS * interval + settings.PROBE_TIMEOUT
    return sorted(
        name
        for name, sample in queues.items()
        if sample["depth"]
        and now - sample["at"] <= recent
        and sample["at"] - sample["since"] >= STUCK_INTERVALS * interval
    )


def check_queues(queues: dict[str, dict]) -> tuple[bool, str]:
    """No chunk queue has tasks that no worker takes (see the module docstring)."""
    stuck = stuck_queues(queues)
    if not stuck:
        waiting = ", ".join(f"{name}: {queues[name]['depth']}" for name in sorted(queues))
        return True, f"chunk tasks waiting: {waiting}" if waiting else "no chunk queue"
    name, sample = stuck[0], queues[stuck[0]]
    return False, (
        f"queue {name!r}: {sample['depth']} chunk tasks waiting, none taken for "
        f"{sample['at'] - sample['since']:.0f} s: no worker consumes it. Start one with "
        f"`MAC_PROBE_QUEUE={name} celery -A macweb worker -Q {name}`, or restart the master "
        "(mac restart master): its worker consumes every queue its settings name"
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
        last, queues = last_sweep(client), queue_depths(client)
    except Exception:
        # The redis check already fails and names the cause; do not blame sweeps too.
        sweeps_result, summary = (True, "unknown while redis is unavailable"), None
        targets_result = queues_result = sweeps_result
    else:
        stuck = " and ".join(repr(name) for name in stuck_queues(queues))
        sweeps_result, summary = check_sweeps(last, stuck), _last_sweep_summary(last)
        targets_result, queues_result = check_targets(last), check_queues(queues)
    results = {
        "database": check_database(),
        "redis": redis_result,
        "sweeps": sweeps_result,
        "targets": targets_result,
        "queues": queues_result,
    }
    failed = [name for name, (ok, _detail) in results.items() if not ok]
    optional = {"alertmanager": check_alertmanager()}
    if results["database"][0]:
        optional["alert_channels"] = check_channels()
    if redis_result[0]:
        optional["node_alerts"] = check_node_alert_posts()
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
