"""GET /api/v1/nodes/: authentication, filters, search, pagination and the detail view."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token

from inventory.choices import EventKind, GpuVendor, NodeStatus
from inventory.services import record_event

pytestmark = pytest.mark.django_db


def hostnames(response) -> list[str]:
    return [n["hostname"] for n in response.json()["results"]]


def test_reads_need_authentication(api_client, make_node):
    make_node()

    listed = api_client.get("/api/v1/nodes/")

    assert listed.status_code == 401
    assert listed["WWW-Authenticate"].startswith("Token")


def test_an_api_token_reads_the_list(api_client, user, make_node):
    make_node("gpu-01")
    token = Token.objects.create(user=user)

    response = api_client.get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Token {token.key}")

    assert response.status_code == 200
    assert hostnames(response) == ["gpu-01"]


def test_a_logged_in_user_reads_the_list(client, user, make_node):
    make_node("gpu-01")
    client.force_login(user)

    response = client.get("/api/v1/nodes/")

    assert response.status_code == 200
    assert hostnames(response) == ["gpu-01"]


def test_list_is_paginated_and_never_shows_keys(auth_client, make_node):
    for i in range(5):
        make_node(f"gpu-{i:02d}")

    page = auth_client.get("/api/v1/nodes/?limit=2&offset=2").json()

    assert page["count"] == 5
    assert [n["hostname"] for n in page["results"]] == ["gpu-02", "gpu-03"]
    assert page["next"] and page["previous"]
    assert all("node_key_hash" not in n for n in page["results"])


def test_list_shows_the_fields_the_dashboard_shows(auth_client, make_node):
    node = make_node("gpu-01", labels={"rack": "a1"})

    [listed] = auth_client.get("/api/v1/nodes/").json()["results"]

    assert set(listed) == set(node.summary())
    assert listed["labels"] == {"rack": "a1"} and listed["hostname"] == "gpu-01"
    assert set(auth_client.get(f"/api/v1/nodes/{node.pk}/").json()) > set(node.summary())


def test_filter_by_status_vendor_maintenance_and_label(auth_client, make_node):
    make_node("a-online", status=NodeStatus.ONLINE, gpu_vendor=GpuVendor.NVIDIA)
    make_node("b-offline", status=NodeStatus.OFFLINE, gpu_vendor=GpuVendor.AMD, maintenance=True)
    make_node("c-unknown", labels={"rack": "a1", "row__x": "y"})

    assert hostnames(auth_client.get("/api/v1/nodes/?status=offline")) == ["b-offline"]
    both = auth_client.get("/api/v1/nodes/?status=offline&status=online")
    assert hostnames(both) == ["a-online", "b-offline"]
    assert hostnames(auth_client.get("/api/v1/nodes/?gpu_vendor=nvidia")) == ["a-online"]
    assert hostnames(auth_client.get("/api/v1/nodes/?maintenance=true")) == ["b-offline"]
    assert hostnames(auth_client.get("/api/v1/nodes/?label=rack=a1")) == ["c-unknown"]
    assert hostnames(auth_client.get("/api/v1/nodes/?label=row__x=y")) == ["c-unknown"]


@pytest.mark.parametrize(
    ("query", "field"),
    [("status=sleeping", "status"), ("gpu_vendor=intel", "gpu_vendor"), ("label=rack", "label")],
)
def test_bad_filter_values_answer_400_naming_the_filter(auth_client, query, field):
    response = auth_client.get(f"/api/v1/nodes/?{query}")

    assert response.status_code == 400
    assert field in response.json()


def test_search_by_hostname_and_ip(auth_client, make_node):
    make_node("gpu-01", "10.1.0.1")
    make_node("cpu-02", "10.2.0.2")

    assert hostnames(auth_client.get("/api/v1/nodes/?search=gpu")) == ["gpu-01"]
    assert hostnames(auth_client.get("/api/v1/nodes/?search=10.2.0")) == ["cpu-02"]


def test_filter_by_ip_finds_exactly_that_address(auth_client, make_node):
    # ?search=10.0.0.1 finds all three: the address is in the others'.
    make_node("a-one", "10.0.0.1")
    make_node("b-ten", "10.0.0.10")
    make_node("c-seventeen", "10.0.0.17")
    make_node("d-six", "2001:db8::1")

    assert hostnames(auth_client.get("/api/v1/nodes/?search=10.0.0.1")) == [
        "a-one", "b-ten", "c-seventeen"
    ]  # fmt: skip
    assert hostnames(auth_client.get("/api/v1/nodes/?ip=10.0.0.1")) == ["a-one"]
    several = auth_client.get("/api/v1/nodes/?ip=10.0.0.17&ip=10.0.0.1")
    assert hostnames(several) == ["a-one", "c-seventeen"]
    assert hostnames(auth_client.get("/api/v1/nodes/?ip=10.0.0.2")) == []
    # IPv6 in any valid spelling finds the address as the inventory stores it.
    for spelling in ("2001:db8::1", "2001:DB8:0:0:0:0:0:1", "2001:0db8::0001"):
        assert hostnames(auth_client.get("/api/v1/nodes/", {"ip": spelling})) == ["d-six"]
    combined = auth_client.get("/api/v1/nodes/?ip=10.0.0.1&ip=10.0.0.10&search=b-")
    assert hostnames(combined) == ["b-ten"]


@pytest.mark.parametrize(
    "value",
    ["", "10.0.0", "10.0.0.256", "010.0.0.1", "0xa000001", "gpu-01", "10.0.0.1 ",
     "fe80::1%eth0", "2001:db8::g", "1" * 5000],
)  # fmt: skip
def test_a_malformed_ip_is_a_400_naming_it_and_saying_what_to_send(auth_client, make_node, value):
    make_node("gpu-01", "10.0.0.1")

    response = auth_client.get("/api/v1/nodes/", {"ip": ["10.0.0.1", value]})

    assert response.status_code == 400
    [message] = response.json()["ip"]
    assert "Use ip=<IPv4 or IPv6 address>, e.g. ip=10.0.0.17" in message
    assert len(message) < 400  # never the whole of a long value


def test_detail_includes_the_twenty_most_recent_events(auth_client, make_node):
    node = make_node("gpu-01", nics=[{"name": "mlx5_0"}], exporters={"sys-exporter": 29101})
    for i in range(25):
        record_event(node, EventKind.ONLINE, f"event {i}", actor="probe")

    response = auth_client.get(f"/api/v1/nodes/{node.pk}/")

    assert response.status_code == 200
    body = response.json()
    assert body["nics"] == [{"name": "mlx5_0"}]
    assert body["exporters"] == {"sys-exporter": 29101}
    assert [e["message"] for e in body["events"]] == [f"event {i}" for i in range(24, 4, -1)]
    assert "node_key_hash" not in body


def test_unknown_node_is_404(auth_client):
    assert auth_client.get("/api/v1/nodes/999999/").status_code == 404


def test_the_api_is_read_only(auth_client, make_node):
    node = make_node()

    assert auth_client.delete(f"/api/v1/nodes/{node.pk}/").status_code == 405
    assert auth_client.post("/api/v1/nodes/", {}, format="json").status_code == 405


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("ordering=last_seem", "ordering"),
        ("ordering=hostname,-bogus", "ordering"),
        ("ordering=node_key_hash", "ordering"),
        ("ordering=", "ordering"),
        ("limit=0", "limit"),
        ("offset=null", "offset"),
        # Past the 4,300 digits int() takes: a 400, not a 500.
        ("limit=" + "9" * 5000, "limit"),
        ("offset=" + "9" * 5000, "offset"),
    ],
)
def test_a_bad_ordering_or_page_is_a_400_naming_it(auth_client, make_node, query, field):
    make_node("gpu-01")
    response = auth_client.get(f"/api/v1/nodes/?{query}")
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_ordering_by_a_listed_field_either_way(auth_client, make_node):
    make_node("gpu-01", gpu_count=8)
    make_node("gpu-02", gpu_count=4)
    assert hostnames(auth_client.get("/api/v1/nodes/?ordering=gpu_count")) == ["gpu-02", "gpu-01"]
    assert hostnames(auth_client.get("/api/v1/nodes/?ordering=-hostname")) == ["gpu-02", "gpu-01"]
