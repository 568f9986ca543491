"""POST /api/v1/nodes/<id>/reset-key: staff forget a node's key from a script, as the
admin's action does; the agent's next registration from its address gets a new one."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from inventory import services
from inventory.choices import EventKind
from inventory.models import Node, NodeEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_script(staff) -> APIClient:
    """A script holding a staff user's API token, as docs/api.md shows with curl."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=staff).key}")
    return client


def url(pk: int) -> str:
    return f"/api/v1/nodes/{pk}/reset-key"


def test_a_lost_key_is_reset_by_a_script_and_the_next_registration_gets_a_new_one(
    register, staff_script
):
    old_key = register("gpu-01", remote="10.0.0.5").json()["node_key"]
    node = Node.objects.get()
    # The node was re-imaged: its key is gone, and a registration without it from a new
    # address is refused.
    assert register("gpu-01", remote="10.0.0.9").status_code == 403

    response = staff_script.post(url(node.pk))

    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["id"], body["hostname"], body["reset"]) == (node.pk, "gpu-01", True)
    assert "sudo mac start agent" in body["next_step"] and "10.0.0.5" in body["next_step"]
    event = node.events.get(kind=EventKind.KEY_RESET)
    assert event.actor == "api:admin"
    again = register("gpu-01", remote="10.0.0.5")
    assert again.status_code == 200
    assert again.json()["node_key"] not in ("", old_key)


def test_only_staff_may_reset_a_key(make_node, user):
    node = make_node(key="the-key")
    anonymous = APIClient().post(url(node.pk))
    operator = APIClient()
    operator.force_authenticate(user)

    assert anonymous.status_code == 401
    assert operator.post(url(node.pk)).status_code == 403
    node.refresh_from_db()
    assert services.node_key_matches(node, "the-key")
    assert not NodeEvent.objects.filter(kind=EventKind.KEY_RESET).exists()


def test_an_unknown_node_is_a_404_and_other_methods_are_refused(staff_script, make_node):
    node = make_node(key="the-key")

    assert staff_script.post(url(node.pk + 1000)).status_code == 404
    assert staff_script.get(url(node.pk)).status_code == 405
    node.refresh_from_db()
    assert services.node_key_matches(node, "the-key")


def test_a_node_deleted_during_the_request_is_a_404_with_no_event(
    staff_script, make_node, monkeypatch
):
    node = make_node(key="the-key")
    reset = services.reset_node_keys

    def deleted_first(nodes, **kwargs):
        # An admin deletes the node between the view's lookup and the reset.
        services.remove_node(node, actor="admin:other", message="deleted in the admin")
        return reset(nodes, **kwargs)

    monkeypatch.setattr(services, "reset_node_keys", deleted_first)

    response = staff_script.post(url(node.pk))

    assert response.status_code == 404, response.json()
    assert not NodeEvent.objects.filter(kind=EventKind.KEY_RESET).exists()
