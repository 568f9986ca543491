"""/health watches Prometheus: ready is ok; hung or gone is "degraded", within a short deadline."""

from __future__ import annotations

import shutil
import time

import pytest

from healthcheck import health
from testkit.dashboard_servers import start_prometheus_config
from testkit.frontdoor import Stopped
from testkit.ports import free_port

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.prometheus,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus is missing"),
]

SLACK = 1.0  # a loaded 2-core CI machine


@pytest.fixture(autouse=True)
def just_started(monkeypatch):
    """A master that started a moment ago: "no sweep yet" is not a failure then, however
    long the session has run (only the prometheus check is under test here)."""
    monkeypatch.setattr(health, "PROCESS_STARTED", time.time())


@pytest.fixture
def prometheus(tmp_path, settings):
    server = start_prometheus_config({"scrape_configs": []}, tmp_path / "prometheus")
    settings.PROMETHEUS_URL = server.url
    yield server
    server.stop()


def test_a_ready_prometheus_is_ok(client, prometheus):
    body = client.get("/health").json()

    assert body["checks"]["prometheus"] == {
        "ok": True,
        "detail": f"Prometheus at {prometheus.url} is ready",
    }
    assert "prometheus" not in body["degraded"]


def test_a_hung_prometheus_degrades_health_within_the_deadline(client, prometheus):
    with Stopped(prometheus.proc.pid):
        started = time.monotonic()
        response = client.get("/health")
        took = time.monotonic() - started

    body = response.json()
    assert response.status_code == 200 and body["status"] == "degraded"
    assert "prometheus" in body["degraded"] and "prometheus" not in body["failed"]
    assert "did not answer within 0.5 s" in body["checks"]["prometheus"]["detail"]
    assert took < health.OUTSIDE_DEADLINE + SLACK


def test_no_prometheus_is_named_with_its_address(client, settings):
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"

    detail = client.get("/health").json()["checks"]["prometheus"]["detail"]

    assert detail == f"Prometheus at {settings.PROMETHEUS_URL} is unreachable: Connection refused"
