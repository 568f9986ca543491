"""POST /api/v1/nodes/self/events: an agent adds an ip_forward reset to its node's history."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.utils import timezone

from contract.services import NODE_KEY_HEADER
from inventory.api.throttles import NODE_EVENT_RATE
from inventory.choices import EventKind
from inventory.models import NodeEvent

pytestmark = pytest.mark.django_db
URL = "/api/v1/nodes/self/events"
KEY = "node-events-test-key"


def _now(**delta) -> str:
    return (timezone.now() + dt.timedelta(**delta)).isoformat()


def _report(**fields) -> dict:
    return {"kind": "ip_forward_reset", "when": _now(seconds=-2), **fields}


def _post(api_client, body, key: str | None = KEY):
    headers = {f"HTTP_{NODE_KEY_HEADER.upper().replace('-', '_')}": key} if key else {}
    return api_client.post(URL, json.dumps(body), content_type="application/json", **headers)


def test_it_records_the_reset_in_the_nodes_history(api_client, make_node, auth_client):
    node = make_node("gpu-07", key=KEY)
    carrier = _now(seconds=-3)
    answer = _post(api_client, _report(link="enp65s0f0", carrier_at=carrier, reasserted=True))
    assert answer.status_code == 201, answer.json()
    [event] = NodeEvent.objects.filter(node=node)
    assert event.kind == EventKind.IP_FORWARD_RESET
    assert event.actor == "sys-manager"
    assert event.message == (
        "IPv4 forwarding was reset to 0 on the node, after enp65s0f0 gained carrier; "
        "sys-manager set it back to 1"
    )
    assert event.data["link"] == "enp65s0f0" and event.data["reasserted"] is True
    assert event.data["resets"] == 1
    assert dt.datetime.fromisoformat(event.data["carrier_at"]) == dt.datetime.fromisoformat(carrier)
    assert answer.json()["id"] == event.pk and answer.json()["hostname"] == "gpu-07"
    # ...and people see it in the node's history.
    history = auth_client.get(f"/api/v1/nodes/{node.pk}/").json()["events"]
    assert history[0]["kind"] == "ip_forward_reset"


def test_a_report_standing_for_several_resets_says_how_many(api_client, make_node):
    make_node(key=KEY)
    assert _post(api_client, _report(resets=3)).status_code == 201
    event = NodeEvent.objects.get(kind=EventKind.IP_FORWARD_RESET)
    assert event.message == (
        "IPv4 forwarding was reset to 0 on the node 3 times; it stays 0 until fixed"
    )


@pytest.mark.parametrize("key", [None, "not-a-node-key"])
def test_without_the_nodes_key_it_is_refused(api_client, make_node, key):
    make_node(key=KEY)
    answer = _post(api_client, _report(), key=key)
    assert answer.status_code == 403
    assert f"{NODE_KEY_HEADER} is missing or matches no node" in answer.json()["detail"]
    assert not NodeEvent.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field", "needle"),
    [
        ({"kind": "registered"}, "kind", "not a valid choice"),
        ({"when": None}, "when", "null"),
        ({"when": "yesterday"}, "when", "with its offset"),
        ({"when": 1733000000}, "when", "Must be a JSON string"),
        ({"when": _now(hours=1)}, "when", "future"),
        ({"when": _now(days=-31)}, "when", "older than 30 days"),
        ({"link": "enp65s0f0-with-a-long-name"}, "link", "15"),
        ({"link": "eth0/../x"}, "link", "pattern"),
        ({"link": " eth0"}, "link", "pattern"),
        ({"link": "eth0\n"}, "link", "without a newline"),
        ({"when": "2026-12-06"}, "when", "with its offset"),
        ({"when": "2026-12-06T14:02:11"}, "when", "with its offset"),
        ({"carrier_at": "2026-12-06T14:02:11.5"}, "carrier_at", "with its offset"),
        ({"link": 7}, "link", "Must be a JSON string"),
        ({"carrier_at": 5}, "carrier_at", "Must be a JSON string"),
        ({"reasserted": "yes"}, "reasserted", "Must be a JSON boolean"),
        ({"reasserted": 1}, "reasserted", "Must be a JSON boolean"),
        ({"resets": 0}, "resets", "greater than or equal to 1"),
        ({"resets": True}, "resets", "Must be a JSON integer"),
        ({"resets": "2"}, "resets", "Must be a JSON integer"),
        ({"resets": 10**7}, "resets", "less than or equal to 1000000"),
    ],
)
def test_bad_fields_answer_400_naming_the_field(api_client, make_node, fields, field, needle):
    make_node(key=KEY)
    answer = _post(api_client, _report(**fields))
    assert answer.status_code == 400
    body = answer.json()
    assert list(body) == [field], body
    assert needle in " ".join(body[field]), body
    assert not NodeEvent.objects.exists()


def test_a_missing_kind_and_a_body_that_is_no_object_are_named(api_client, make_node):
    make_node(key=KEY)
    missing = _post(api_client, {"when": _now()})
    assert missing.status_code == 400 and "kind" in missing.json()
    listed = _post(api_client, [_report()])
    assert listed.status_code == 400 and "non_field_errors" in listed.json()
    headers = {f"HTTP_{NODE_KEY_HEADER.upper().replace('-', '_')}": KEY}
    broken = api_client.post(URL, "{not json", content_type="application/json", **headers)
    assert broken.status_code == 400 and "body" in broken.json()


def test_reports_are_rate_limited_per_node(api_client, make_node):
    make_node(key=KEY)
    other = make_node(key="another-node-key")
    limit = int(NODE_EVENT_RATE.split("/")[0])
    for _ in range(limit):
        assert _post(api_client, _report()).status_code == 201
    answer = _post(api_client, _report())
    assert answer.status_code == 429
    assert int(answer["Retry-After"]) > 0
    assert f"the limit is {NODE_EVENT_RATE} per node" in answer.json()["detail"]
    # Another node has its own window.
    assert _post(api_client, _report(), key="another-node-key").status_code == 201
    assert NodeEvent.objects.filter(node=other).count() == 1
