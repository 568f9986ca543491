"""Registrations and admin changes reach the dashboard through the Channels layer."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from inventory.live import DASHBOARD_GROUP

pytestmark = pytest.mark.django_db


@pytest.fixture
def dashboard():
    """A channel in the dashboard group, on the real Redis layer; yields a receive()."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(DASHBOARD_GROUP, channel)

    async def _receive():
        return await asyncio.wait_for(layer.receive(channel), timeout=5)

    yield async_to_sync(_receive)
    async_to_sync(layer.group_discard)(DASHBOARD_GROUP, channel)


def test_registration_pushes_the_node_summary(register, dashboard):
    register("gpu-01", remote="10.0.0.5", gpu_vendor="amd", gpu_count=2)

    message = dashboard()

    assert message["type"] == "nodes.changed"
    [change] = message["changes"]
    assert change["hostname"] == "gpu-01"
    assert change["ip"] == "10.0.0.5"
    assert change["gpu_vendor"] == "amd"


def test_admin_maintenance_action_pushes_the_change(client, staff, make_node, dashboard):
    node = make_node("gpu-01")
    client.force_login(staff)

    client.post(
        "/admin/inventory/node/", {"action": "maintenance_on", "_selected_action": [node.pk]}
    )

    [change] = dashboard()["changes"]
    assert change["hostname"] == "gpu-01"
    assert change["maintenance"] is True


def test_deregistration_pushes_the_removed_node_id(
    api_client, register, dashboard, django_capture_on_commit_callbacks
):
    body = register("gpu-01", remote="10.0.0.5").json()
    dashboard()  # the registration's own push

    with django_capture_on_commit_callbacks(execute=True):
        response = api_client.post(
            "/api/v1/deregister",
            {"hostname": "gpu-01"},
            format="json",
            HTTP_X_MAC_NODE_KEY=body["node_key"],
            REMOTE_ADDR="10.0.0.5",
        )
    assert response.status_code == 200

    message = dashboard()
    assert message["type"] == "nodes.changed"
    assert message["changes"] == []
    assert message["removed"] == [body["id"]]
