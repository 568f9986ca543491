"""/health with its Redis refusing the password, hung or gone: 503 naming Redis, at once,
and never the password (issue 31).

The master is the real serving stack (nginx, gunicorn + uvicorn) on a redis-server of
the test's own that wants a password (requirepass), which MAC_REDIS_URL carries. Before,
the gone Redis printed MAC_REDIS_URL with its password to anyone, and a changed password
made /health a bare "Server Error (500)": the probe's pooled connection was still logged
in while the Django cache's new one was refused.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest
import redis

from testkit.frontdoor import Stopped, start_stack
from tests.healthcheck.private_servers import PrivateRedis

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PASSWORD = "redis-pass-Xq7-never-shown"
ROTATED = "redis-pass-rotated-9Kd"
BOUND = 1.0  # seconds: the bulkheads' promise, well under a second
SAMPLES = 10


@dataclass
class Raw:
    status: int
    text: str  # the status line's words, every header and the body
    seconds: float
    body: dict


def fetch(url: str) -> Raw:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            status, reason, headers, raw = (
                response.status, response.reason, response.headers, response.read()
            )  # fmt: skip
    except urllib.error.HTTPError as exc:
        status, reason, headers, raw = exc.code, exc.reason, exc.headers, exc.read()
    seconds = time.monotonic() - started
    text = f"{status} {reason}\n{headers}\n{raw.decode(errors='replace')}"
    try:
        body = json.loads(raw)
    except ValueError:
        body = {}
    return Raw(status, text, seconds, body)


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    directory = tmp_path_factory.mktemp("health-redis")
    private = PrivateRedis(directory, password=PASSWORD)
    private.start()
    stack = start_stack(directory / "master", {"MAC_REDIS_URL": private.url})
    try:
        yield stack, private
    finally:
        stack.stop()
        private.stop()


def assert_names_redis_without_the_password(answers: list[Raw], words: str) -> None:
    for answer in answers:
        assert answer.status == 503, answer.text
        assert answer.body["failed"] == ["redis"], answer.text
        detail = answer.body["checks"]["redis"]["detail"]
        assert detail.startswith("Redis at redis://127.0.0.1:"), detail
        assert words in detail, detail
        assert PASSWORD not in answer.text and ROTATED not in answer.text, answer.text
    took = sorted(answer.seconds for answer in answers)
    assert took[-1] < BOUND, took


def test_a_healthy_redis_with_a_password_is_not_shown(master):
    stack, _private = master
    answer = fetch(f"{stack.url}/health")
    assert answer.status == 200, answer.text
    assert answer.body["checks"]["redis"] == {"ok": True, "detail": "pong"}
    assert PASSWORD not in answer.text


def test_a_redis_that_refuses_the_password_is_named(master):
    stack, private = master
    assert fetch(f"{stack.url}/health").status == 200  # the pooled connections are open
    private.client().config_set("requirepass", ROTATED)  # they stay logged in
    try:
        answers = [fetch(f"{stack.url}/health") for _ in range(SAMPLES)]
    finally:
        as_rotated = redis.Redis(port=private.port, password=ROTATED, socket_timeout=5)
        as_rotated.config_set("requirepass", PASSWORD)
    assert_names_redis_without_the_password(answers, "refuses the master's password")
    assert "MAC_REDIS_URL" in answers[0].body["checks"]["redis"]["detail"]
    assert fetch(f"{stack.url}/health").status == 200


def test_a_hung_redis_is_named_well_under_a_second(master):
    stack, private = master
    assert fetch(f"{stack.url}/health").status == 200
    with Stopped(private.process.pid):
        answers = [fetch(f"{stack.url}/health") for _ in range(SAMPLES)]
    assert_names_redis_without_the_password(answers, "did not answer within 0.5 s")
    assert fetch(f"{stack.url}/health").status == 200


def test_a_redis_that_is_gone_is_named(master):
    stack, private = master
    private.stop()
    answers = [fetch(f"{stack.url}/health") for _ in range(SAMPLES)]
    assert_names_redis_without_the_password(answers, "is unavailable")
