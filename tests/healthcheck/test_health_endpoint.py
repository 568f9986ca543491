"""The master's /health: 200 when database and Redis answer, 503 naming the one that does not."""

import pytest

pytestmark = pytest.mark.django_db


def test_it_answers_200_with_checks(client):
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is True


def test_it_answers_503_naming_redis_when_redis_is_down(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    response = client.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["redis"]
    assert "127.0.0.1:1" in body["checks"]["redis"]["detail"]
