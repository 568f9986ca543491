"""The master's /health: 200 when database and Redis answer, 503 naming the one that does not."""

import re

import pytest

from testkit.ports import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_master(monkeypatch):
    """A master that has just started (its grace period before the first sweep), whatever
    time the test run has spent before this module."""
    import time

    from healthcheck import health

    monkeypatch.setattr(health, "PROCESS_STARTED", time.time())


def test_it_answers_200_with_checks(client):
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    # Nothing fatal; whether Alertmanager runs is tests/alerting/test_health.py's concern.
    assert body["status"] in ("ok", "degraded") and body["failed"] == []
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is True


def test_a_load_balancer_may_ask_with_head(client):
    answer = client.head("/health")
    assert answer.status_code == client.get("/health").status_code
    assert answer.content == b""


def test_it_answers_503_naming_redis_when_redis_is_down(client, settings):
    port = free_port()  # nothing listens there
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    response = client.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["redis"]
    assert f"127.0.0.1:{port}" in body["checks"]["redis"]["detail"]


def _record(client, finished_ago: float, **extra) -> None:
    import time

    from healthcheck.state import SweepStats, record_sweep

    now = time.time()
    stats = SweepStats(started_at=now - finished_ago - 1, finished_at=now - finished_ago)
    stats.duration, stats.nodes, stats.online, stats.offline = 1.0, 3, 2, 1
    for key, value in extra.items():
        setattr(stats, key, value)
    record_sweep(client, stats)


def test_it_says_when_the_last_sweep_finished(client, sweep_redis):
    _record(sweep_redis, finished_ago=5)
    body = client.get("/health").json()
    assert body["failed"] == []
    assert body["checks"]["sweeps"]["ok"] is True
    assert "finished 5 s ago" in body["checks"]["sweeps"]["detail"]
    assert body["last_sweep"]["duration_seconds"] == 1.0
    assert body["last_sweep"]["nodes"] == 3


def test_it_turns_503_when_sweeps_stopped(client, sweep_redis, settings, monkeypatch):
    from healthcheck import health

    settings.PROBE_INTERVAL = 30.0
    monkeypatch.setattr(health, "PROCESS_STARTED", health.PROCESS_STARTED - 3600)
    _record(sweep_redis, finished_ago=600)
    response = client.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["sweeps"]
    assert "mac-worker and mac-beat" in body["checks"]["sweeps"]["detail"]


def test_a_fresh_master_gets_a_grace_period_before_its_first_sweep(
    client, sweep_redis, settings, monkeypatch
):
    from healthcheck import health

    settings.PROBE_INTERVAL = 30.0
    assert client.get("/health").status_code == 200  # just started, no sweep yet
    monkeypatch.setattr(health, "PROCESS_STARTED", health.PROCESS_STARTED - 3600)
    response = client.get("/health")
    assert response.status_code == 503
    assert "no sweep has finished" in response.json()["checks"]["sweeps"]["detail"]


def test_an_old_sweep_from_before_a_restart_does_not_fail_a_fresh_master(
    client, sweep_redis, settings
):
    settings.PROBE_INTERVAL = 30.0
    _record(sweep_redis, finished_ago=86400)
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["failed"] == []
    # The sweeps check itself passes (no other check's 200 hides it), within the grace
    # that counts from this start, not from the day-old sweep, which it still shows.
    sweeps = body["checks"]["sweeps"]
    assert sweeps["ok"] is True, sweeps
    assert re.match(r"last sweep finished 8640\d s ago in 1\.00 s \(3 nodes", sweeps["detail"])


@pytest.mark.parametrize("service", ["PROMETHEUS_URL", "ALERTMANAGER_URL"])
def test_a_service_that_does_not_speak_http_only_degrades_it(client, settings, service):
    from healthcheck.health import forget_outside_answers
    from testkit.fakehttp import NotHttp

    with NotHttp() as server:
        setattr(settings, service, server.url)
        forget_outside_answers()
        client.raise_request_exception = False
        response = client.get("/health")

    assert response.status_code == 200, response.content[:300]
    body = response.json()
    name = "prometheus" if service == "PROMETHEUS_URL" else "alertmanager"
    assert body["status"] == "degraded" and name in body["degraded"]
    assert server.url in body["checks"][name]["detail"]
    assert "does not speak HTTP" in body["checks"][name]["detail"]
