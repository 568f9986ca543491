"""POST /api/v1/deregister and GET /api/v1/self: both need the node's key."""

from __future__ import annotations

import pytest

from inventory.choices import EventKind
from inventory.models import Node, NodeEvent

pytestmark = pytest.mark.django_db


def deregister(client, hostname, key=None, **extra):
    headers = {"HTTP_X_MAC_NODE_KEY": key} if key is not None else {}
    return client.post(
        "/api/v1/deregister", {"hostname": hostname}, format="json", **headers, **extra
    )


def test_deregistration_with_the_key_removes_the_node(api_client, register):
    key = register("gpu-01").json()["node_key"]

    response = deregister(api_client, "GPU-01", key)

    assert response.status_code == 200
    assert response.json() == {"hostname": "gpu-01", "deregistered": True}
    assert not Node.objects.exists()
    event = NodeEvent.objects.get(kind=EventKind.DEREGISTERED)
    assert event.hostname == "gpu-01"
    assert event.node is None
    assert event.actor == "agent"


@pytest.mark.parametrize("key", [None, ""], ids=["missing", "empty"])
def test_deregistration_without_the_key_is_refused(api_client, register, key):
    register("gpu-01")

    response = deregister(api_client, "gpu-01", key)

    assert response.status_code == 403
    assert "X-MAC-Node-Key" in response.json()["detail"]
    assert Node.objects.filter(hostname="gpu-01").exists()


def test_another_nodes_key_does_not_deregister(api_client, register):
    register("gpu-01", remote="10.0.0.1")
    other_key = register("gpu-02", remote="10.0.0.2").json()["node_key"]

    response = deregister(api_client, "gpu-01", other_key)

    assert response.status_code == 403
    assert "gpu-02's" in response.json()["detail"]
    assert Node.objects.filter(hostname="gpu-01").exists()


@pytest.mark.parametrize("hostname", ["gpu-01", "gpu-99"], ids=["registered", "unknown"])
def test_a_key_no_node_holds_gets_one_answer_whether_the_name_is_registered_or_not(
    api_client, register, hostname
):
    """No refusal tells a caller which names are registered (they could be enumerated)."""
    register("gpu-01", remote="10.0.0.1")
    other_key = register("gpu-02", remote="10.0.0.2").json()["node_key"]

    unknown_key = deregister(api_client, hostname, "a-key-no-node-holds")
    another_nodes_key = deregister(api_client, hostname, other_key)

    assert unknown_key.status_code == 404
    assert unknown_key.json() == {
        "detail": "no registered node holds this node key (the node was removed already, "
        "or an admin reset its key): nothing to deregister."
    }
    assert another_nodes_key.status_code == 403
    assert another_nodes_key.json() == {
        "detail": "this node key is gpu-02's, and a node deregisters only itself; "
        f"an admin can remove {hostname} in the admin instead."
    }
    assert Node.objects.count() == 2


def test_deregistration_after_a_key_reset_is_refused(api_client, register):
    from inventory.services import reset_node_key

    key = register("gpu-01").json()["node_key"]
    reset_node_key(Node.objects.get(), actor="admin:root")

    response = deregister(api_client, "gpu-01", key)

    assert response.status_code == 404
    assert "an admin reset its key" in response.json()["detail"]
    assert Node.objects.filter(hostname="gpu-01").exists()


@pytest.mark.parametrize("body", [{}, {"hostname": "bad_name"}, {"hostname": 7}])
def test_deregistration_with_bad_hostname_is_400(api_client, body):
    response = api_client.post("/api/v1/deregister", body, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["hostname"]


def test_self_shows_what_the_master_thinks_of_the_node(api_client, register):
    key = register("gpu-01", remote="10.0.0.5", gpu_vendor="amd", gpu_count=2).json()["node_key"]

    response = api_client.get("/api/v1/self", HTTP_X_MAC_NODE_KEY=key)

    assert response.status_code == 200
    body = response.json()
    assert body["hostname"] == "gpu-01"
    assert body["ip"] == "10.0.0.5"
    for field in ("status", "status_reason", "status_detail", "diagnosis", "exporter_health"):
        assert field in body
    assert body["last_seen"] is None
    assert "node_key" not in body
    assert "node_key_hash" not in body


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_self_without_a_valid_key_is_403(api_client, register, key):
    register("gpu-01")
    headers = {"HTTP_X_MAC_NODE_KEY": key} if key else {}

    response = api_client.get("/api/v1/self", **headers)

    assert response.status_code == 403
    assert "register first" in response.json()["detail"]
