"""The node page's scrape health (scrapes.json): asked after the page is drawn, inside the
Prometheus bulkhead, from the targets URL; the page itself never asks Prometheus.

Prometheus answering with real data is tests/healthcheck/test_simfleet_prometheus.py's
(single Prometheus) and tests/maccli/test_scaleout.py's (the store and the targets view).
"""

from __future__ import annotations

import time

import pytest
from django.test import Client, override_settings

from alerting import bulkheads
from testkit.factories import online_gpu_node
from testkit.fakehttp import JsonHandler, serving
from testkit.ports import free_port

pytestmark = pytest.mark.django_db


def test_it_needs_a_login_and_a_node(client_user):
    assert Client().get("/nodes/1/scrapes.json").status_code == 401
    missing = client_user.get("/nodes/999999/scrapes.json")
    assert missing.status_code == 404 and "999999" in missing.json()["node"][0]


def test_the_page_does_not_ask_prometheus_and_links_its_scrape_health(client_user):
    node = online_gpu_node()
    hung = f"http://127.0.0.1:{free_port()}"
    with override_settings(PROMETHEUS_URL=hung, TARGETS_URL=hung):
        started = time.monotonic()
        html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    assert time.monotonic() - started < 1.0
    assert f'data-scrapes-url="/nodes/{node.pk}/scrapes.json"' in html


def test_prometheus_away_is_a_503_with_the_reason(client_user):
    node = online_gpu_node()
    down = f"http://127.0.0.1:{free_port()}"
    with override_settings(PROMETHEUS_URL=down, TARGETS_URL=down):
        response = client_user.get(f"/nodes/{node.pk}/scrapes.json")
    assert response.status_code == 503 and response["Retry-After"]
    body = response.json()
    assert body["available"] is False and body["jobs"] == {}
    assert body["error"].startswith(f"Prometheus at {down} is unreachable")


def test_the_store_and_targets_view_are_named_without_their_passwords(client_user):
    node = online_gpu_node()
    store, targets = free_port(), free_port()
    with override_settings(
        PROMETHEUS_URL=f"http://reader:st0re-secret@127.0.0.1:{store}",
        TARGETS_URL=f"http://127.0.0.1:{targets}/?token=t4rgets-secret",
    ):
        error = client_user.get(f"/nodes/{node.pk}/scrapes.json").json()["error"]
    assert error.startswith(
        f"Prometheus at http://127.0.0.1:{store} (targets: http://127.0.0.1:{targets}/) is "
    ), error
    assert "st0re-secret" not in error and "t4rgets-secret" not in error


def test_past_the_prometheus_bulkhead_it_is_not_asked(client_user):
    node = online_gpu_node()
    with override_settings(BULKHEAD_PROMETHEUS=1):
        bulkheads.PROMETHEUS.reset()
        try:
            with bulkheads.PROMETHEUS.slot():  # a chart waits on Prometheus
                response = client_user.get(f"/nodes/{node.pk}/scrapes.json")
        finally:
            bulkheads.PROMETHEUS.reset()
    assert response.status_code == 503
    assert "already wait on Prometheus" in response.json()["error"]


def test_the_last_error_comes_from_the_targets_url_not_the_store(client_user):
    """Scale-out mode: `up` from the store, the down target's error from the targets view."""
    node = online_gpu_node()
    up = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"job": "sys-exporter", "node": str(node.pk)}, "value": [1, "1"]},
                {"metric": {"job": "sys-manager", "node": str(node.pk)}, "value": [1, "0"]},
            ],
        },
    }
    targets = {
        "status": "success",
        "data": {
            "activeTargets": [
                {"labels": {"job": "sys-manager", "node": str(node.pk)},
                 "lastError": "unexpected status code 404", "health": "down"},
            ],
            "droppedTargets": [],
        },
    }  # fmt: skip
    asked: list[str] = []

    def handler(answers: dict) -> type[JsonHandler]:
        class Answering(JsonHandler):
            def do_GET(self) -> None:
                asked.append(self.path)
                self.send_json(200, answers[self.path.split("?", 1)[0]])

        return Answering

    with (
        serving(handler({"/api/v1/query": up})) as store,
        serving(handler({"/api/v1/targets": targets})) as view,
        override_settings(PROMETHEUS_URL=store, TARGETS_URL=view),
    ):
        body = client_user.get(f"/nodes/{node.pk}/scrapes.json").json()
    assert body == {
        "jobs": {
            "sys-exporter": {"health": "up", "error": ""},
            "sys-manager": {"health": "down", "error": "unexpected status code 404"},
        },
        "error": "",
        "available": True,
    }
    assert [path.split("?")[0] for path in asked] == ["/api/v1/query", "/api/v1/targets"]
    assert "scrapePool=sys-manager" in asked[1]


def _vector(*samples: object) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


@pytest.mark.parametrize(
    ("up", "targets"),
    [
        (None, None),
        (_vector({"metric": "sys-exporter", "value": [1, "1"]}), None),
        (_vector({"metric": {"job": "sys-exporter"}, "value": []}), None),
        (_vector("up"), None),
        (_vector({"metric": {"job": "sys-exporter"}, "value": [1, "0"]}),
         {"status": "success", "data": {"activeTargets": ["sys-exporter"]}}),
    ],
    ids=["null", "metric-string", "value-empty", "sample-string", "target-string"],
)  # fmt: skip
def test_an_answer_without_the_expected_data_is_a_503_with_the_reason(client_user, up, targets):
    """The store or the targets view answering 200 with something else: said, never a 500."""
    node = online_gpu_node()
    answers = {"/api/v1/query": up, "/api/v1/targets": targets}

    class Store(JsonHandler):
        def do_GET(self) -> None:
            self.send_json(200, answers[self.path.split("?", 1)[0]])

    with serving(Store) as store, override_settings(PROMETHEUS_URL=store, TARGETS_URL=store):
        response = client_user.get(f"/nodes/{node.pk}/scrapes.json")
    assert response.status_code == 503 and response["Retry-After"]
    body = response.json()
    assert body["available"] is False and body["jobs"] == {}
    assert body["error"].startswith(f"Prometheus at {store} answered without the expected data")
