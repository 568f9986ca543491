"""The node page: status and why, per-exporter health, history, chart slots."""

from __future__ import annotations

import pytest
from django.test import Client

from inventory.choices import EventKind, GpuVendor
from inventory.models import NodeEvent
from macweb.dashboard import queries
from tests.dashboard.factories import make_node, make_offline

pytestmark = pytest.mark.django_db


def test_it_needs_a_login():
    node = make_node()
    response = Client().get(f"/nodes/{node.pk}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_shows_status_diagnosis_fix_exporters_and_history(client_user):
    node = make_offline(
        hostname="gpu-a17",
        exporters={"sys-exporter": 29101, "nic-exporter": 29500, "dcgm-exporter": 29150},
        exporter_health={"sys-exporter": False, "nic-exporter": True},
    )
    NodeEvent.objects.create(node=node, hostname=node.hostname, kind=EventKind.REGISTERED)
    NodeEvent.objects.create(
        node=node, hostname=node.hostname, kind=EventKind.OFFLINE, message="sys-exporter timed out"
    )
    html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    info = queries.describe_diagnosis(node.diagnosis)
    assert "gpu-a17" in html
    assert "sys-exporter timed out: no answer within 3.0 s" in html
    assert info["text"] in html
    if info["fix"]:
        assert info["fix"].split("\n")[0] in html
    assert 'class="exp-down"><td class="mono">sys-exporter' in html
    assert 'class="exp-up"><td class="mono">nic-exporter' in html
    assert 'class="exp-unknown"><td class="mono">dcgm-exporter' in html
    assert 'class="exp-absent"><td class="mono">bmc-agent' in html
    assert html.index(">Offline</td>") < html.index(">Registered</td>")  # newest first
    for name in ("cpu", "memory", "gpu_util", "gpu_memory", "gpu_temp", "gpu_power", "rdma"):
        assert f'/nodes/{node.pk}/charts/{name}.json"' in html
    assert "vendor/uplot/uPlot.iife.min.js" in html


def test_a_node_without_gpus_gets_no_gpu_charts(client_user):
    node = make_node(gpu_vendor=GpuVendor.NONE, gpu_count=0)
    html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    assert "gpu_util.json" not in html
    assert "No GPU charts: this node reports no GPUs." in html


def test_an_unknown_node_is_404(client_user):
    assert client_user.get("/nodes/424242/").status_code == 404


def test_staff_see_the_admin_link(client_staff, client_user):
    node = make_node()
    link = f'href="/admin/inventory/node/{node.pk}/change/"'
    assert link in client_staff.get(f"/nodes/{node.pk}/").content.decode()
    assert link not in client_user.get(f"/nodes/{node.pk}/").content.decode()
