"""What an agent reports is declared once (contract.master_api.REPORTED_FIELDS).

The registration body, the master's Registration, its serializer, the node's detail
and the admin each follow that one list; a field added to it and forgotten in any of
them fails here, naming the place. The admin once lacked gpu_model and agent_network.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from contract.master_api import REGISTRATION_FIELDS, REPORTED_FIELDS, registration_body
from inventory.api.serializers import NodeDetailSerializer, RegistrationSerializer
from inventory.models import Node
from inventory.services import Registration

pytestmark = pytest.mark.django_db


def test_the_registration_body_has_every_declared_field_in_order():
    assert tuple(registration_body("gpu-01", "10.0.0.17", {})) == REGISTRATION_FIELDS


def test_the_serializer_checks_every_declared_field_and_no_other():
    assert tuple(RegistrationSerializer().fields) == REGISTRATION_FIELDS


def test_a_registration_holds_every_declared_field_and_reports_them():
    assert tuple(f.name for f in dataclasses.fields(Registration)) == REGISTRATION_FIELDS
    reg = Registration(hostname="gpu-01", ip="10.0.0.17", gpu_model="H200", agent_network="host")
    assert tuple(reg.reported()) == REPORTED_FIELDS
    assert (reg.reported()["gpu_model"], reg.reported()["agent_network"]) == ("H200", "host")


def test_the_node_stores_and_details_every_declared_field():
    stored = {f.name for f in Node._meta.get_fields()}
    assert set(REPORTED_FIELDS) <= stored
    assert set(REPORTED_FIELDS) <= set(NodeDetailSerializer.Meta.fields)


def test_the_admin_shows_every_declared_field(client, staff, make_node):
    node = make_node("gpu-01", "10.0.0.1", gpu_model="NVIDIA H200", agent_network="host")
    client.force_login(staff)
    html = client.get(f"/admin/inventory/node/{node.pk}/change/").content.decode()
    shown = set(re.findall(r'name="([a-z_]+)"', html))
    missing = [name for name in REPORTED_FIELDS if name not in shown]
    assert not missing, f"the admin's node form lacks {missing}"
    assert 'value="NVIDIA H200"' in html
