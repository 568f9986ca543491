"""The dashboard's alerts: JSON for the panels, the live frame, the maintenance switch."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.test import Client

from alerting import bulkheads
from inventory.live import broadcast_alerts
from testkit.fakehttp import JsonHandler, serving
from testkit.ports import free_port
from tests.macweb.dashboard.test_consumer import open_socket

pytestmark = pytest.mark.django_db


def test_the_alerts_json_needs_a_login(client):
    assert client.get("/alerts.json").status_code == 401
    assert client.get("/nodes/1/alerts.json").status_code == 401


def test_alertmanager_down_is_said_and_the_pages_still_render(client, user, make_node, settings):
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    node = make_node("gpu-31", "10.1.0.31")
    client.force_login(user)

    answer = client.get("/alerts.json")
    assert answer.status_code == 503 and answer["Retry-After"]
    fleet = answer.json()
    assert fleet["available"] is False and fleet["error"].startswith("cannot reach")
    one = client.get(f"/nodes/{node.pk}/alerts.json").json()
    assert one == {"available": False, "error": fleet["error"], "alerts": [], "silences": []}
    page = client.get("/").content.decode()
    assert 'id="alerts-panel"' in page and "gpu-31" in page
    node_page = client.get(f"/nodes/{node.pk}/").content.decode()
    assert 'data-json-url="/nodes/' in node_page
    assert "maintenance-toggle" not in node_page  # not staff
    assert client.get("/nodes/999999/alerts.json").status_code == 404


def test_alerts_past_the_alertmanager_bulkhead_answer_503_with_the_reason(
    client, user, make_node, settings
):
    settings.BULKHEAD_ALERTMANAGER = 1
    node = make_node("gpu-33", "10.1.0.33")
    client.force_login(user)
    bulkheads.ALERTMANAGER.reset()
    try:
        with bulkheads.ALERTMANAGER.slot():  # another request waits on Alertmanager
            fleet = client.get("/alerts.json")
            one = client.get(f"/nodes/{node.pk}/alerts.json")
    finally:
        bulkheads.ALERTMANAGER.reset()
    assert fleet.status_code == one.status_code == 503
    assert fleet.json()["available"] is False and fleet.json()["alerts"] == []
    assert "already wait on Alertmanager (MAC_BULKHEAD_ALERTMANAGER=1)" in fleet.json()["error"]
    assert one.json()["silences"] == [] and one.json()["error"] == fleet.json()["error"]


def test_staff_switch_maintenance_from_the_node_page(client, staff, user, make_node):
    node = make_node("gpu-32", "10.1.0.32")
    url = f"/nodes/{node.pk}/maintenance"
    client.force_login(user)
    assert client.post(url, {"maintenance": "on"}).status_code == 403
    client.force_login(staff)
    assert (
        'id="maintenance-toggle">Start maintenance'
        in client.get(f"/nodes/{node.pk}/").content.decode()
    )
    assert client.post(url, {"maintenance": "sometimes"}).status_code == 400
    response = client.post(url, {"maintenance": "on"})
    assert response.status_code == 302 and response["Location"] == f"/nodes/{node.pk}/"
    node.refresh_from_db()
    assert node.maintenance is True
    event = node.events.first()
    assert (event.kind, event.actor) == ("maintenance_on", "dashboard:admin")


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_an_alerts_push_reaches_an_open_page(user):
    client = Client()
    await sync_to_async(client.force_login)(user)
    comm = await open_socket(client.cookies[settings.SESSION_COOKIE_NAME].value)
    snapshot = {"available": False, "error": "cannot reach it", "count": 0, "alerts": []}
    await sync_to_async(broadcast_alerts)(snapshot)
    frame = await comm.receive_json_from(timeout=10)
    assert frame == {"type": "alerts.changed", "alerts": snapshot}
    await comm.disconnect()
    await sync_to_async(connections.close_all)()


SIGN_IN = b"<!DOCTYPE html><html><title>Sign in</title><form>...</form></html>"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (SIGN_IN, f"but with text: {SIGN_IN.decode()}"),
        (b'{"status": "ok"}', "but with JSON that is an object"),
        (b'["a", "b"]', "but with JSON that is a list holding a string"),
        (b"", "but with nothing"),
    ],
)
def test_an_answer_that_is_not_alertmanager_s_is_said(
    client, user, make_node, settings, body, said
):
    """A sign-in proxy's page (or any other body) answered with 200 in Alertmanager's place:
    "alerts unavailable: <why>", never a 500."""
    node = make_node("gpu-34", "10.1.0.34")
    client.force_login(user)

    class Proxy(JsonHandler):
        def do_GET(self) -> None:
            self.send_json(200, body)

    with serving(Proxy) as url:
        settings.ALERTMANAGER_URL = url
        fleet = client.get("/alerts.json")
        one = client.get(f"/nodes/{node.pk}/alerts.json")
        page = client.get("/alerts/")
        filtered = client.get("/?alert=MacNodeOffline")

    assert fleet.status_code == one.status_code == page.status_code == 503
    error = fleet.json()["error"]
    assert error == f"{url} answered GET /api/v2/alerts not with a list of objects {said}"
    assert one.json()["available"] is False and one.json()["alerts"] == []
    assert "Alerts unavailable: " in page.content.decode()
    assert filtered.status_code == 400
    assert "alert: alerts unavailable: " in filtered.content.decode()


def test_silences_that_are_not_alertmanager_s_are_said(client, user, make_node, settings):
    node = make_node("gpu-35", "10.1.0.35")
    client.force_login(user)

    class Proxy(JsonHandler):
        def do_GET(self) -> None:
            self.send_json(200, b"[]" if self.path.startswith("/api/v2/alerts") else SIGN_IN)

    with serving(Proxy) as url:
        settings.ALERTMANAGER_URL = url
        one = client.get(f"/nodes/{node.pk}/alerts.json")
        page = client.get("/alerts/")

    assert one.status_code == page.status_code == 503
    said = f"{url} answered GET /api/v2/silences not with a list of objects but with text: "
    assert one.json()["error"].startswith(said)
    assert "Alerts unavailable: " + said in page.content.decode()
