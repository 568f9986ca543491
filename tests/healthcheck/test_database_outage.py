"""A PostgreSQL outage: /health and registration answer 503 "database unavailable" at once.

Before, both waited for the connection pool's 30 s timeout (registration five times
over, as it retried), so agents and load balancers saw hung requests rather than an
answer. The API server here is the real one (gunicorn + uvicorn), on a private
PostgreSQL cluster that the test stops and starts again.
"""

from __future__ import annotations

import time

import pytest

from tests.inventory.liveserver import start_api_server, timed_call

pytestmark = pytest.mark.slow

FEW_SECONDS = 8.0  # the promise: an answer within a few seconds, not the pool's 30 s


def test_it_answers_503_database_unavailable_within_seconds_and_recovers(tmp_path, database):
    server = start_api_server(tmp_path / "master", env={"DATABASE_URL": database.url()})
    try:
        status, body, _ = timed_call(f"{server.url}/health")
        assert status == 200, body
        assert timed_call(f"{server.url}/api/v1/register", {"hostname": "gpu-01"})[0] == 201

        database.stop()
        status, body, took = timed_call(f"{server.url}/health")
        assert status == 503, body
        assert "database" in body["failed"]
        assert body["checks"]["database"]["detail"].startswith("database unavailable")
        assert took < FEW_SECONDS, took

        status, body, took = timed_call(f"{server.url}/api/v1/register", {"hostname": "gpu-02"})
        assert status == 503, body
        assert body["detail"].startswith("database unavailable")
        assert took < FEW_SECONDS, took

        database.start()
        deadline = time.monotonic() + 30
        while timed_call(f"{server.url}/health")[0] != 200:
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.5)
        # The same address as gpu-01: the node is found again by its address (200).
        assert timed_call(f"{server.url}/api/v1/register", {"hostname": "gpu-02"})[0] in (200, 201)
    except AssertionError:
        print(server.log_tail())
        raise
    finally:
        server.stop()
