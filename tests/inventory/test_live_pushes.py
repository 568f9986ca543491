"""Every inventory change reaches the dashboard through the Channels layer, on commit.

The pushes are read from the real Redis channel layer, by a channel that joined the
dashboard's group the way the consumer does. The tests commit for real
(transactional database): a push must come only after the commit, and never for a
change that rolled back.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest
from channels.layers import get_channel_layer
from django.db import transaction

from inventory import services
from inventory.live import join_dashboard, leave_dashboard
from inventory.models import Node
from testkit.channel_layer import receive_within
from tests.inventory.test_admin import form_fields

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/inventory/node/"
REPO = Path(__file__).resolve().parents[2]
QUIET = 0.3  # seconds a push would take to arrive if it had been sent


class Dashboard:
    """One channel in the dashboard's group, on the real Redis layer.

    Everything runs on one event loop of its own: channels_redis binds a channel's
    receive buffer to the loop that first reads it, and a receive that timed out
    must not leave the next one on another loop.
    """

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.layer = get_channel_layer()
        self.channel = self.runner.run(self.layer.new_channel())
        self.runner.run(join_dashboard(self.layer, self.channel))

    def receive(self, timeout: float = 5) -> dict:
        return self.runner.run(receive_within(self.layer, self.channel, timeout))

    def nothing(self) -> bool:
        """True when no push arrives within QUIET seconds."""
        try:
            self.receive(timeout=QUIET)
        except TimeoutError:
            return True
        return False

    def close(self) -> None:
        self.runner.run(leave_dashboard(self.layer, self.channel))
        self.runner.close()


@pytest.fixture
def dashboard():
    board = Dashboard()
    yield board
    board.close()


@pytest.fixture
def admin_client(client, staff):
    client.force_login(staff)
    return client


def registration(hostname: str = "gpu-01", ip: str = "10.0.0.5") -> services.Registration:
    return services.Registration(hostname=hostname, ip=ip, gpu_vendor="amd", gpu_count=2)


class Rollback(Exception):
    """Raised to undo a test's transaction."""


# --- Agent changes ---------------------------------------------------------------------


def test_registration_pushes_the_node_summary_only_after_commit(dashboard):
    with transaction.atomic():
        result = services.register_node(registration())
        assert dashboard.nothing()

    message = dashboard.receive()
    assert message["type"] == "nodes.changed"
    assert message["removed"] == []
    [change] = message["changes"]
    assert change == Node.objects.get(pk=result.node.pk).summary()
    assert (change["hostname"], change["ip"], change["gpu_vendor"]) == ("gpu-01", "10.0.0.5", "amd")


def test_a_registration_that_rolls_back_pushes_nothing(dashboard):
    with pytest.raises(Rollback), transaction.atomic():
        services.register_node(registration())
        raise Rollback

    assert dashboard.nothing()
    assert not Node.objects.exists()


def test_a_registration_refused_by_the_node_cap_pushes_nothing(dashboard, settings):
    settings.MAX_NODES = 0

    with pytest.raises(services.NodeLimitReached):
        services.register_node(registration())

    assert dashboard.nothing()


def test_registration_through_the_api_pushes_once(register, dashboard):
    response = register("gpu-01", remote="10.0.0.5", gpu_vendor="amd", gpu_count=2)

    assert response.status_code == 201
    [change] = dashboard.receive()["changes"]
    assert change["id"] == response.json()["id"]
    assert dashboard.nothing()  # the view does not push a second time


def test_reregistration_pushes_the_new_address(register, dashboard):
    key = register("gpu-01", remote="10.0.0.5").json()["node_key"]
    dashboard.receive()

    register("gpu-01", remote="10.0.0.6", key=key)

    [change] = dashboard.receive()["changes"]
    assert (change["hostname"], change["ip"]) == ("gpu-01", "10.0.0.6")


def test_deregistration_pushes_the_removed_node_id(api_client, register, dashboard):
    body = register("gpu-01", remote="10.0.0.5").json()
    dashboard.receive()  # the registration's own push

    response = api_client.post(
        "/api/v1/deregister",
        {"hostname": "gpu-01"},
        format="json",
        HTTP_X_MAC_NODE_KEY=body["node_key"],
        REMOTE_ADDR="10.0.0.5",
    )

    assert response.status_code == 200
    message = dashboard.receive()
    assert (message["changes"], message["removed"]) == ([], [body["id"]])


def test_a_refused_deregistration_pushes_nothing(api_client, register, dashboard):
    register("gpu-01", remote="10.0.0.5")
    dashboard.receive()

    response = api_client.post(
        "/api/v1/deregister",
        {"hostname": "gpu-01"},
        format="json",
        HTTP_X_MAC_NODE_KEY="wrong",
        REMOTE_ADDR="10.0.0.5",
    )

    assert response.status_code == 404  # no node holds that key
    assert dashboard.nothing()


# --- Service functions inside a caller's transaction ---------------------------------


@pytest.mark.parametrize(
    "change",
    [
        lambda node: services.set_maintenance(node, True, actor="admin:root"),
        lambda node: services.reset_node_key(node, actor="admin:root"),
        lambda node: services.remove_node(node, actor="admin:root", message="gone"),
        lambda node: services.edit_node_by_admin(
            node, {"labels": ({}, {"rack": "b2"})}, actor="admin:root"
        ),
    ],
    ids=["maintenance", "key-reset", "removal", "admin-edit"],
)
def test_each_change_waits_for_the_commit_and_vanishes_with_a_rollback(
    change, make_node, dashboard
):
    node = make_node("gpu-01")

    with pytest.raises(Rollback), transaction.atomic():
        change(node)
        raise Rollback
    assert dashboard.nothing()

    node = Node.objects.get(pk=node.pk)
    with transaction.atomic():
        change(node)
        assert dashboard.nothing()
    message = dashboard.receive()
    assert [c["id"] for c in message["changes"]] + message["removed"] == [node.pk]


def test_maintenance_that_is_already_set_pushes_nothing(make_node, dashboard):
    node = make_node("gpu-01", maintenance=True)

    assert services.set_maintenance(node, True, actor="admin:root") is False

    assert dashboard.nothing()


def test_maintenance_off_pushes_the_change(make_node, dashboard):
    node = make_node("gpu-01", maintenance=True)

    services.set_maintenance(node, False, actor="admin:root")

    [change] = dashboard.receive()["changes"]
    assert change["maintenance"] is False


# --- The admin -------------------------------------------------------------------------


def test_admin_add_pushes_the_new_node(admin_client, dashboard):
    data = form_fields(admin_client.get(f"{CHANGELIST}add/").content.decode())
    data.update({"hostname": "gpu-07", "ip": "10.0.0.7"})

    response = admin_client.post(f"{CHANGELIST}add/", data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    [change] = dashboard.receive()["changes"]
    assert change["id"] == Node.objects.get(hostname="gpu-07").pk
    assert change["ip"] == "10.0.0.7"


def test_admin_edit_pushes_the_edited_node(admin_client, make_node, dashboard):
    node = make_node("gpu-01", "10.0.0.1")
    url = f"{CHANGELIST}{node.pk}/change/"
    data = form_fields(admin_client.get(url).content.decode())
    data.update({"maintenance": "on"})

    response = admin_client.post(url, data)

    assert response.status_code == 302
    [change] = dashboard.receive()["changes"]
    assert (change["id"], change["maintenance"]) == (node.pk, True)


def test_admin_save_without_changes_pushes_nothing(admin_client, make_node, dashboard):
    node = make_node("gpu-01", "10.0.0.1")
    url = f"{CHANGELIST}{node.pk}/change/"

    response = admin_client.post(url, form_fields(admin_client.get(url).content.decode()))

    assert response.status_code == 302
    assert dashboard.nothing()


def test_admin_delete_pushes_the_removed_id(admin_client, make_node, dashboard):
    node = make_node("gpu-01")

    admin_client.post(f"{CHANGELIST}{node.pk}/delete/", {"post": "yes"})

    assert dashboard.receive()["removed"] == [node.pk]


@pytest.mark.parametrize("action", ["delete_selected", "deregister"])
def test_admin_bulk_removal_pushes_every_id_in_one_message(
    action, admin_client, make_node, dashboard
):
    nodes = [make_node(), make_node(), make_node()]

    admin_client.post(
        CHANGELIST,
        {"action": action, "_selected_action": [n.pk for n in nodes], "post": "yes"},
    )

    assert not Node.objects.exists()
    assert dashboard.receive()["removed"] == sorted(n.pk for n in nodes)
    assert dashboard.nothing()


def test_admin_maintenance_actions_push_one_message_per_action(admin_client, make_node, dashboard):
    nodes = [make_node(), make_node(maintenance=True)]
    selected = {"_selected_action": [n.pk for n in nodes]}

    admin_client.post(CHANGELIST, {"action": "maintenance_on", **selected})
    on = dashboard.receive()["changes"]
    admin_client.post(CHANGELIST, {"action": "maintenance_off", **selected})
    off = dashboard.receive()["changes"]

    assert [(c["id"], c["maintenance"]) for c in on] == [(nodes[0].pk, True)]
    assert sorted((c["id"], c["maintenance"]) for c in off) == [
        (nodes[0].pk, False),
        (nodes[1].pk, False),
    ]
    assert dashboard.nothing()


def test_admin_key_reset_pushes_the_nodes(admin_client, make_node, dashboard):
    nodes = [make_node(), make_node()]

    admin_client.post(
        CHANGELIST, {"action": "reset_node_key", "_selected_action": [n.pk for n in nodes]}
    )

    assert sorted(c["id"] for c in dashboard.receive()["changes"]) == sorted(n.pk for n in nodes)


# --- Who may push ----------------------------------------------------------------------


def _mentions(word: str) -> set[str]:
    """Runtime modules (not tests, benchmarks or test tooling) whose code names `word`,
    as a name, an attribute, an import or a string."""
    found = set()
    packages = (
        "contract", "exporters", "healthcheck", "scraping", "inventory", "maccli", "macweb",
    )  # fmt: skip
    for package in packages:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                named = (
                    getattr(node, "id", None),
                    getattr(node, "attr", None),
                    node.name if isinstance(node, ast.alias) else None,
                    node.value if isinstance(node, ast.Constant) else None,
                )
                if word in named:
                    found.add(str(path.relative_to(REPO)))
    return found


def test_only_the_inventory_services_and_the_sweep_push():
    assert _mentions("broadcast_node_changes") - {"inventory/live.py"} == {"healthcheck/sweep.py"}
    queuers = _mentions("queue_node_changes") - {"inventory/live.py"}
    assert queuers == {"inventory/services/events.py"}


def test_only_inventory_live_knows_the_group_name():
    from inventory.live import DASHBOARD_GROUP

    assert _mentions(DASHBOARD_GROUP) | _mentions("DASHBOARD_GROUP") == {"inventory/live.py"}
