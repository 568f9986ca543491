"""POST /api/v1/register: new nodes, re-registration, dedupe by hostname then IP, node keys."""

from __future__ import annotations

import hashlib

import pytest

from inventory.choices import EventKind, NodeStatus
from inventory.models import Node, NodeEvent

pytestmark = pytest.mark.django_db

AGENT = {
    "gpu_vendor": "nvidia",
    "gpu_count": 8,
    "nics": [{"name": "mlx5_0", "netdev": "ens1f0", "vendor": "mellanox"}],
    "exporters": {"sys-exporter": 29101, "dcgm-exporter": 29150},
    "agent_version": "0.1.0",
    "machine_id": "0f" * 16,
    "labels": {"rack": "a1"},
}


def kinds(node: Node) -> list[str]:
    return list(node.events.order_by("id").values_list("kind", flat=True))


def test_new_registration_creates_node_and_returns_key_once(register):
    response = register("GPU-01", remote="10.0.0.5", **AGENT)

    assert response.status_code == 201
    body = response.json()
    assert body["hostname"] == "gpu-01"  # stored lower-cased
    assert body["ip"] == "10.0.0.5"
    assert body["status"] == NodeStatus.UNKNOWN
    assert body["gpu_count"] == 8
    assert body["exporters"] == AGENT["exporters"]
    assert body["labels"] == {"rack": "a1"}
    assert len(body["node_key"]) >= 40
    assert "node_key_hash" not in body
    node = Node.objects.get()
    assert node.node_key_hash == hashlib.sha256(body["node_key"].encode()).hexdigest()
    assert [e["kind"] for e in body["events"]] == [EventKind.REGISTERED]


def test_reregistration_from_same_address_needs_no_key_and_returns_none(register):
    first = register("gpu-01", remote="10.0.0.5", **AGENT).json()

    again = register("gpu-01", remote="10.0.0.5", **{**AGENT, "gpu_count": 4})

    assert again.status_code == 200
    body = again.json()
    assert "node_key" not in body
    assert body["id"] == first["id"]
    assert body["gpu_count"] == 4
    assert Node.objects.count() == 1
    assert kinds(Node.objects.get()) == [EventKind.REGISTERED, EventKind.REREGISTERED]


def test_reregistration_with_new_ip_and_key_reuses_node(register):
    key = register("gpu-01", remote="10.0.0.5").json()["node_key"]

    moved = register("gpu-01", remote="10.0.0.6", key=key)

    assert moved.status_code == 200
    assert moved.json()["ip"] == "10.0.0.6"
    node = Node.objects.get()
    assert node.ip == "10.0.0.6"
    assert kinds(node) == [EventKind.REGISTERED, EventKind.IP_CHANGED, EventKind.REREGISTERED]
    change = node.events.get(kind=EventKind.IP_CHANGED)
    assert change.data == {"old": "10.0.0.5", "new": "10.0.0.6"}
    assert change.actor == "agent"


@pytest.mark.parametrize("key", [None, "", "not-the-key"], ids=["missing", "empty", "wrong"])
def test_reregistration_with_new_ip_without_the_key_is_refused(register, key):
    register("gpu-01", remote="10.0.0.5")

    taken = register("gpu-01", remote="10.6.6.6", key=key)

    assert taken.status_code == 403
    assert "X-MAC-Node-Key" in taken.json()["detail"]
    assert Node.objects.get().ip == "10.0.0.5"


def test_registration_matched_by_ip_with_new_hostname_renames_node(register):
    first = register("gpu-01", remote="10.0.0.5").json()

    renamed = register("gpu-01-renamed", remote="10.0.0.5")

    assert renamed.status_code == 200
    assert renamed.json()["id"] == first["id"]
    node = Node.objects.get()
    assert node.hostname == "gpu-01-renamed"
    event = node.events.get(kind=EventKind.HOSTNAME_CHANGED)
    assert event.data == {"old": "gpu-01", "new": "gpu-01-renamed"}


def test_another_machine_behind_the_same_address_does_not_rename_the_node(register):
    # Two hosts behind one NAT: the master sees one source address for both.
    first = register("gpu-01", remote="10.0.0.5", machine_id="a" * 32).json()

    other = register("gpu-02", remote="10.0.0.5", machine_id="b" * 32)

    assert other.status_code == 409
    detail = other.json()["detail"]
    assert "another machine" in detail and "MAC_AGENT_IP" in detail
    node = Node.objects.get()
    assert (node.id, node.hostname) == (first["id"], "gpu-01")
    assert EventKind.HOSTNAME_CHANGED not in kinds(node)
    # The same machine renamed, or one whose machine-id is not known, still renames it.
    assert register("gpu-01b", remote="10.0.0.5", machine_id="a" * 32).status_code == 200
    assert register("gpu-01c", remote="10.0.0.5").status_code == 200
    assert Node.objects.get().hostname == "gpu-01c"


def test_moving_to_an_address_held_by_another_node_is_a_conflict(register):
    key = register("gpu-01", remote="10.0.0.5").json()["node_key"]
    register("gpu-02", remote="10.0.0.6")

    response = register("gpu-01", remote="10.0.0.6", key=key)

    assert response.status_code == 409
    assert "gpu-02" in response.json()["detail"]
    assert set(Node.objects.values_list("hostname", "ip")) == {
        ("gpu-01", "10.0.0.5"),
        ("gpu-02", "10.0.0.6"),
    }


def test_after_a_key_reset_the_current_address_gets_a_new_key(register):
    from inventory.services import reset_node_key

    old_key = register("gpu-01", remote="10.0.0.5").json()["node_key"]
    reset_node_key(Node.objects.get(), actor="admin:root")

    elsewhere = register("gpu-01", remote="10.0.0.9", key=old_key)
    assert elsewhere.status_code == 403

    again = register("gpu-01", remote="10.0.0.5", key=old_key)
    assert again.status_code == 200
    new_key = again.json()["node_key"]
    assert new_key != old_key
    assert register("gpu-01", remote="10.0.0.9", key=new_key).status_code == 200
    assert EventKind.KEY_RESET in kinds(Node.objects.get())


def test_node_cap_answers_429_with_retry_after(register, settings, make_node):
    settings.MAX_NODES = 2
    make_node()
    make_node()

    response = register("gpu-03", remote="10.0.0.7")

    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert "MAC_MAX_NODES" in response.json()["detail"]
    # Existing nodes still re-register while the inventory is full.
    existing = Node.objects.first()
    assert register(existing.hostname, remote=existing.ip).status_code == 200


def test_events_keep_the_hostname_after_deregistration(register, api_client):
    key = register("gpu-01", remote="10.0.0.5").json()["node_key"]
    api_client.post(
        "/api/v1/deregister", {"hostname": "gpu-01"}, format="json", HTTP_X_MAC_NODE_KEY=key
    )

    kinds_left = NodeEvent.objects.filter(hostname="gpu-01").values_list("kind", flat=True)
    assert set(kinds_left) == {EventKind.REGISTERED, EventKind.DEREGISTERED}
    assert not Node.objects.exists()


def test_node_cap_refusal_leaves_no_row_and_no_event(register, settings, make_node):
    settings.MAX_NODES = 2
    make_node()
    make_node()

    assert register("gpu-03", remote="10.0.0.7").status_code == 429

    assert Node.objects.count() == 2
    assert not NodeEvent.objects.filter(hostname="gpu-03").exists()
