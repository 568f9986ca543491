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

A sharded sweep whose chunks partly failed (healthcheck.chunks) still finished: the
"sweeps" check stays green and its detail names how many failed and the first error.

The "targets" check says whether the last sweep could write Prometheus' file-SD
targets: a full or read-only disk fails it with the directory and the system's
reason, while "sweeps" stays green, since the sweep itself ran.

"alertmanager", "alert_channels", "alert_config", "node_alerts" (alerting.health),
"slurm" and "drain_budget" (scheduler.health, while MAC_SLURM_DRAIN is not off; "slurm"
also when no drain pass completed for a few intervals), "slurm_node_map" (a
MAC_SLURM_NODE_MAP file a pass could not read, whatever the drain's mode) and
"prometheus" only degrade the answer: the master still probes and shows nodes without
them, so /health stays 200 with `"status": "degraded"` and names them in `degraded`,
while nobody would be notified. Prometheus and Alertmanager are asked at once, within
OUTSIDE_DEADLINE together; whatever they answer, hung, refusing, or not HTTP at all (an
https port asked with http://), is one of these failed checks, never a 500.

The "queues" check names a chunk queue (MAC_PROBE_QUEUE) that no worker consumes:
every sweep samples its backlog (healthcheck.tasks.sample_chunk_queue), and a backlog
that has not shrunk for STUCK_INTERVALS intervals has no consumer, since a consumer
takes even expired tasks off the queue. Sweeps then stop finishing too; the "sweeps"
check says so without blaming mac-worker and mac-beat, which both run. Reading the
sample costs /health one Redis command, never a broadcast to the workers.

Redis is asked within REDIS_DEADLINE, and with the master's own credentials each time
(AUTH, not only PING: a connection opened before a password changed stays logged in,
while every new one is refused): hung, gone or refusing the password, /health answers
503 naming Redis at once, and touches Redis no more in that request.

Nothing secret leaves: every URL is shown without its credentials, the report is
scrubbed of the master's own passwords as a last guard (contract.redact), and the
channels' names only go to a logged-in caller (alerting.health).
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import redis
from django.conf import settings
from django.db import connection

from alerting.client import Alertmanager
from alerting.health import (
    check_alertmanager,
    check_channels,
    check_config_in_step,
    check_node_alert_posts,
)
from contract import __version__
from contract.redact import redact, url_secrets, url_without_credentials
from healthcheck.state import get_redis, last_sweep, queue_depths
from scheduler.health import scheduler_checks
from scraping.engines import scaleout_checks

PROCESS_STARTED = time.time()
STALE_INTERVALS = 3
STUCK_INTERVALS = 2
# Seconds /health waits on Prometheus and Alertmanager (asked at once): a hung one must
# leave /health well under a second (issue 26).
OUTSIDE_DEADLINE = 0.5
# Seconds an answer of theirs is reused (see _LastAnswer).
OUTSIDE_REUSE = 1.0
# Seconds /health waits on Redis (each read, and a new connection): a hung Redis must
# leave /health well under a second too, where a loopback Redis answers in microseconds.
REDIS_DEADLINE = 0.5


def check_database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:
        return False, f"database unavailable: {exc}".strip()[:300]
    return True, connection.vendor


def check_redis(client: redis.Redis) -> tuple[bool, str]:
    """Redis answers, and still takes the master's credentials (see the module docstring)."""
    kwargs = client.connection_pool.connection_kwargs
    try:
        if kwargs.get("password"):
            user = [kwargs["username"]] if kwargs.get("username") else []
            client.execute_command("AUTH", *user, kwargs["password"])
        else:
            client.ping()
    except Exception as exc:
        return False, redis_failure(exc)
    return True, "pong"


def redis_failure(exc: Exception) -> str:
    """What went wrong with Redis, in words that name it and never its password."""
    where = f"Redis at {url_without_credentials(settings.REDIS_URL)} (MAC_REDIS_URL)"
    if isinstance(exc, redis.AuthenticationError) or _refused_login(exc):
        return (
            f"{where} refuses the master's password ({exc}): make MAC_REDIS_URL's password "
            "Redis's own (requirepass) on every master process and restart the master"
        )[:400]
    if isinstance(exc, redis.TimeoutError):
        return (
            f"{where} did not answer within {REDIS_DEADLINE:g} s: is it hung? (mac status master)"
        )
    if isinstance(exc, redis.ConnectionError):
        return f"{where} is unavailable: {exc}"[:400]
    return f"{where} failed: {type(exc).__name__}: {exc}"[:400]


def _refused_login(exc: Exception) -> bool:
    """Redis's own words for a login it refuses, whatever class redis-py gave them."""
    words = str(exc)
    return isinstance(exc, redis.ResponseError) and words.startswith(("NOAUTH", "WRONGPASS"))


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
        detail = (
            f"last sweep finished {now - finished:.0f} s ago in {last['duration']:.2f} s "
            f"({last['nodes']} nodes, {last['online']} online, {last['offline']} offline)"
        )
        failed = last.get("chunks_failed", 0)
        if failed:
            detail += (
                f"; {failed} of its chunks failed, their nodes are probed again next sweep "
                f"(first: {last.get('chunk_error', '')}; the worker's log has the traceback)"
            )
        return True, detail
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


def run_health_checks(named: bool = True) -> dict:
    """The whole report; `named`: the caller is logged in and may see the channels' names."""
    redis_checks, summary = _redis_checks()
    results = {"database": check_database(), **redis_checks}
    node_alerts = results.pop("node_alerts", None)
    failed = [name for name, (ok, _detail) in results.items() if not ok]
    optional = outside_service_checks()
    if results["database"][0]:
        optional["alert_channels"] = check_channels(named)
        optional["alert_config"] = check_config_in_step(named)
    if node_alerts:
        optional["node_alerts"] = node_alerts
    if results["redis"][0]:
        # Scale-out mode (MAC_SCRAPE_SHARDS): the store and each scraper, as last checked
        # in the background (their answers are in the cache); nothing when off.
        optional.update(scaleout_checks())
        # The scheduler link (MAC_SLURM_DRAIN): what the last drain pass found; nothing when off.
        optional.update(scheduler_checks(named=named))
    degraded = [name for name, (ok, _detail) in optional.items() if not ok]
    results.update(optional)
    secrets = _master_secrets()
    checks = {
        name: {"ok": ok, "detail": redact(detail, secrets)}
        for name, (ok, detail) in results.items()
    }
    status = "unhealthy" if failed else "degraded" if degraded else "ok"
    return {
        "status": status,
        "failed": failed,
        "degraded": degraded,
        "checks": checks,
        "version": __version__,
        "last_sweep": summary,
    }


def _redis_checks() -> tuple[dict[str, tuple[bool, str]], dict | None]:
    """redis, sweeps, targets, queues and node_alerts, and the last sweep's summary.

    Whatever of these touches Redis (the sweep's records through the probe's client, the
    node alerts' record through Django's cache) and fails names Redis; the others are
    then "unknown" rather than blamed.
    """
    client = get_redis(timeout=REDIS_DEADLINE)  # shared by the process; its pool stays open
    redis_result = check_redis(client)
    if redis_result[0]:
        try:
            last, queues = last_sweep(client), queue_depths(client)
            node_alerts = check_node_alert_posts()
        except redis.RedisError as exc:
            redis_result = (False, redis_failure(exc))
    if not redis_result[0]:
        unknown = (True, "unknown while redis is unavailable")
        checks = dict.fromkeys(("sweeps", "targets", "queues"), unknown)
        return {"redis": redis_result, **checks}, None
    stuck = " and ".join(repr(name) for name in stuck_queues(queues))
    checks = {
        "redis": redis_result,
        "sweeps": check_sweeps(last, stuck),
        "targets": check_targets(last),
        "queues": check_queues(queues),
        "node_alerts": node_alerts,
    }
    return checks, _last_sweep_summary(last)


def _master_secrets() -> list[str]:
    """The passwords in the master's own URLs: a last guard, should a message echo one."""
    urls = [
        settings.REDIS_URL,
        settings.CELERY_BROKER_URL,
        settings.ALERTMANAGER_URL,
        settings.PROMETHEUS_URL,
        settings.TARGETS_URL,
        *settings.SCRAPER_URLS,
    ]
    found = [secret for url in urls for secret in url_secrets(url)]
    database_password = settings.DATABASES["default"].get("PASSWORD")
    return [*found, *([database_password] if database_password else [])]


def check_prometheus(timeout: float = OUTSIDE_DEADLINE) -> tuple[bool, str]:
    """Prometheus answers its readiness URL: without it no rule is evaluated, and the
    charts are empty. A "degraded" check: the master still probes and shows nodes."""
    url = settings.PROMETHEUS_URL.rstrip("/") + "/-/ready"
    where = url_without_credentials(settings.PROMETHEUS_URL)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (settings)
            response.read()
    except urllib.error.HTTPError as exc:
        return False, f"Prometheus at {where} is not ready (HTTP {exc.code})"
    except TimeoutError:
        return False, (
            f"Prometheus at {where} did not answer within {timeout:g} s: "
            "no rule is evaluated (mac status master)"
        )
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        words = getattr(reason, "strerror", None) or str(reason)
        return False, f"Prometheus at {where} is unreachable: {words}"
    except http.client.HTTPException as exc:  # urllib lets these out unwrapped
        return False, not_http(f"Prometheus at {where}", exc)
    return True, f"Prometheus at {where} is ready"


def not_http(what: str, exc: Exception) -> str:
    """Something answered, but not in HTTP: an https port asked with http://, a port that
    another service holds."""
    return (
        f"{what} does not speak HTTP ({type(exc).__name__}: {exc}): is it the right port, "
        "and http:// or https:// as it serves?"
    )[:400]


class _LastAnswer:
    """The last answer of a check, refreshed in the background once OUTSIDE_REUSE old.

    A request never waits on a hung service, except the first of a process, which has
    no answer to give yet: it asks (within OUTSIDE_DEADLINE) and waits. Later ones
    answer with the last result, and the first of them to find it stale starts one
    thread that asks again; so /health says "degraded" at most OUTSIDE_REUSE plus
    OUTSIDE_DEADLINE after a service hangs, and costs the agents nothing meanwhile.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[tuple, tuple[float, dict]] = {}

    def get(self, key: tuple, ask: Callable[[], dict]) -> dict:
        at, last = self._answers.get(key, (0.0, None))
        if last is None:
            with self._lock:
                at, last = self._answers.get(key, (0.0, None))
                if last is None:  # nobody asked while this request waited for the lock
                    return self._ask(key, ask)
        if time.monotonic() - at >= OUTSIDE_REUSE and self._lock.acquire(blocking=False):
            threading.Thread(
                target=self._refresh, args=(key, ask), name="mac-health-ask", daemon=True
            ).start()
        return last

    def forget(self) -> None:
        self._answers.clear()

    def _ask(self, key: tuple, ask: Callable[[], dict]) -> dict:
        answer = ask()
        self._answers[key] = (time.monotonic(), answer)
        return answer

    def _refresh(self, key: tuple, ask: Callable[[], dict]) -> None:
        try:
            self._ask(key, ask)
        finally:
            self._lock.release()


_outside = _LastAnswer()


def forget_outside_answers() -> None:
    """Drop the remembered answers of Prometheus and Alertmanager (tests: a port reused
    by another server must not inherit the last one's answer)."""
    _outside.forget()


def outside_service_checks() -> dict[str, tuple[bool, str]]:
    """Prometheus and Alertmanager, asked at once, each within OUTSIDE_DEADLINE.

    /health answers load balancers and agents (whose registration gives up after 10 s):
    a hung service costs it nothing but the first request of a process, and that one
    at most one short deadline, not one per service (_LastAnswer).
    """
    key = (settings.PROMETHEUS_URL, settings.ALERTMANAGER_URL)
    return _outside.get(key, _ask_outside_services)


def _ask_outside_services() -> dict[str, tuple[bool, str]]:
    alertmanager = Alertmanager(
        settings.ALERTMANAGER_URL, min(settings.ALERTMANAGER_TIMEOUT, OUTSIDE_DEADLINE)
    )
    ask_alertmanager = _never_raises(
        f"Alertmanager at {url_without_credentials(settings.ALERTMANAGER_URL)}",
        lambda: check_alertmanager(alertmanager),
    )
    if settings.SCRAPE_SHARDS >= 1:
        # Scale-out mode runs no Prometheus: the store, the scrapers, vmalert and the
        # targets view have checks of their own (scraping.engines).
        return {"alertmanager": ask_alertmanager()}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mac-health") as pool:
        where = url_without_credentials(settings.PROMETHEUS_URL)
        prometheus = pool.submit(_never_raises(f"Prometheus at {where}", check_prometheus))
        checked = {"alertmanager": ask_alertmanager()}
        checked["prometheus"] = prometheus.result()
    return checked


def _never_raises(
    service: str, check: Callable[[], tuple[bool, str]]
) -> Callable[[], tuple[bool, str]]:
    """`check`, with whatever it did not expect as its failed answer: these services only
    degrade /health, which must never answer 500 because of one of them."""

    def checked() -> tuple[bool, str]:
        try:
            return check()
        except http.client.HTTPException as exc:
            return False, not_http(service, exc)
        except Exception as exc:
            return False, f"{service} could not be checked: {type(exc).__name__}: {exc}"[:400]

    return checked


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
