"""The Django admin for nodes, driven through the real admin views as a staff user."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from inventory.choices import EventKind, GpuVendor, NodeStatus
from inventory.models import Node, NodeEvent
from inventory.services import node_key_matches, record_event

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/inventory/node/"


@pytest.fixture
def admin_client(client, staff):
    client.force_login(staff)
    return client


def change_url(node: Node) -> str:
    return f"{CHANGELIST}{node.pk}/change/"


def run_action(admin_client, action: str, nodes: list[Node]):
    return admin_client.post(
        CHANGELIST,
        {"action": action, "_selected_action": [n.pk for n in nodes]},
        follow=True,
    )


def test_admin_is_staff_only(client, user):
    client.force_login(user)

    response = client.get(CHANGELIST)

    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_changelist_shows_status_ip_gpu_and_maintenance(admin_client, make_node):
    make_node("gpu-01", "10.0.0.1", status=NodeStatus.ONLINE, gpu_vendor=GpuVendor.NVIDIA)

    response = admin_client.get(CHANGELIST)

    assert response.status_code == 200
    text = response.content.decode()
    for column in ("Status", "Ip", "Gpu vendor", "Gpu count", "Last seen", "Maintenance"):
        assert column in text
    assert "gpu-01" in text and "10.0.0.1" in text and "NVIDIA" in text


def test_changelist_filters_and_searches(admin_client, make_node):
    make_node("gpu-01", "10.0.0.1", status=NodeStatus.ONLINE)
    make_node("cpu-02", "10.0.0.2", status=NodeStatus.OFFLINE)

    filtered = admin_client.get(CHANGELIST, {"status__exact": "offline"})
    searched = admin_client.get(CHANGELIST, {"q": "gpu"})

    assert [n.hostname for n in filtered.context["cl"].result_list] == ["cpu-02"]
    assert [n.hostname for n in searched.context["cl"].result_list] == ["gpu-01"]


def form_fields(html: str) -> dict[str, str]:
    """What a browser would post for the page's form: inputs, checked boxes, selects, textareas."""
    fields: dict[str, str] = {}

    class Reader(HTMLParser):
        select: str | None = None
        textarea: str | None = None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            name = a.get("name")
            if tag == "input" and name and a.get("type") not in ("submit", "button"):
                if a.get("type") == "checkbox":
                    if "checked" in a:
                        fields[name] = a.get("value", "on")
                else:
                    fields[name] = a.get("value") or ""
            elif tag == "select" and name:
                self.select = name
            elif tag == "option" and self.select and "selected" in a:
                fields[self.select] = a.get("value", "")
            elif tag == "textarea" and name:
                self.textarea = name
                fields[name] = ""

        def handle_endtag(self, tag):
            if tag == "select":
                self.select = None
            elif tag == "textarea":
                self.textarea = None

        def handle_data(self, data):
            if self.textarea:
                fields[self.textarea] += data

    Reader().feed(html)
    for name in list(fields):
        if name in fields and fields[name].startswith("\n"):
            fields[name] = fields[name][1:]  # browsers drop a textarea's first newline
    return fields


def test_change_form_save_records_an_edited_event(admin_client, make_node):
    node = make_node("gpu-01", "10.0.0.1")
    record_event(node, EventKind.REGISTERED, "registered from 10.0.0.1", actor="agent")
    data = form_fields(admin_client.get(change_url(node)).content.decode())
    data.update({"hostname": "GPU-01-B", "labels": '{"rack": "b2"}', "maintenance": "on"})

    response = admin_client.post(change_url(node), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    node.refresh_from_db()
    assert node.hostname == "gpu-01-b"
    assert node.labels == {"rack": "b2"}
    assert node.maintenance is True
    changed = node.maintenance_changed_at  # a node down when it ends is a new alert
    assert changed is not None
    data = form_fields(admin_client.get(change_url(node)).content.decode())
    data["labels"] = '{"rack": "b3"}'
    assert admin_client.post(change_url(node), data).status_code == 302
    node.refresh_from_db()
    assert node.maintenance_changed_at == changed  # only maintenance moves it
    edited = node.events.filter(kind=EventKind.EDITED).earliest("id")
    assert edited.actor == "admin:admin"
    assert edited.data["fields"] == ["hostname", "labels", "maintenance"]
    assert node.events.filter(kind=EventKind.MAINTENANCE_ON).exists()


def test_change_form_refuses_forbidden_address(admin_client, make_node):
    node = make_node("gpu-01", "10.0.0.1")
    data = form_fields(admin_client.get(change_url(node)).content.decode())
    data["ip"] = "169.254.169.254"

    response = admin_client.post(change_url(node), data)

    assert response.status_code == 200
    assert "metadata" in str(response.context["adminform"].form.errors["ip"])
    node.refresh_from_db()
    assert node.ip == "10.0.0.1"


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("exporters", '["sys-exporter"]', "Exporters: Must be a JSON object"),
        ("exporters", '{"sys-exporter": "29101"}', "The port of 'sys-exporter'"),
        ("exporters", '{"sys-exporter": 70000}', "1 to 65535"),
        ("exporters", '{"Sys Exporter": 29101}', "service names are lower-case"),
        ("labels", '["rack=b2"]', "Labels: Must be a JSON object"),
        ("labels", '{"rack": 2}', "The value of 'rack' must be text"),
        ("labels", '{"rack": "' + "x" * 257 + '"}', "too long"),
        ("nics", '{"name": "mlx5_0"}', "NICs: Must be a JSON list"),
        ("nics", '[{"name": "mlx5_0"}, "mlx5_1"]', "Item 1: Each NIC must be a JSON object"),
        ("nics", '[{"ports": [1, 2]}]', "must be a scalar"),
        ("gpu_count", "4096", "At most 1024 GPUs"),
    ],
)
def test_change_form_refuses_what_registration_refuses(
    admin_client, make_node, field, value, words
):
    """What the pages read keeps the API's shape: a list where the node page looks a port
    up made that page a 500."""
    node = make_node("gpu-01", "10.0.0.1", exporters={"sys-exporter": 29101}, labels={"a": "b"})
    data = form_fields(admin_client.get(change_url(node)).content.decode())
    data[field] = value

    response = admin_client.post(change_url(node), data)

    assert response.status_code == 200
    assert words in " ".join(response.context["adminform"].form.errors[field])
    node.refresh_from_db()
    assert (node.exporters, node.labels, node.nics) == ({"sys-exporter": 29101}, {"a": "b"}, [])
    assert not node.events.filter(kind=EventKind.EDITED).exists()


def test_emptied_json_fields_are_stored_empty_and_the_node_page_shows(admin_client, make_node):
    node = make_node("gpu-01", "10.0.0.1", exporters={"sys-exporter": 29101}, labels={"a": "b"},
                     nics=[{"name": "mlx5_0"}])  # fmt: skip
    data = form_fields(admin_client.get(change_url(node)).content.decode())
    data.update({"exporters": "", "labels": "", "nics": ""})

    response = admin_client.post(change_url(node), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    node.refresh_from_db()
    assert (node.exporters, node.labels, node.nics) == ({}, {}, [])
    page = admin_client.get(f"/nodes/{node.pk}/")
    assert page.status_code == 200
    assert "gpu-01" in page.content.decode()


def test_change_form_keeps_a_port_written_as_a_whole_float(admin_client, make_node):
    node = make_node("gpu-01", "10.0.0.1")
    data = form_fields(admin_client.get(change_url(node)).content.decode())
    data["exporters"] = '{"sys-exporter": 29101.0}'

    assert admin_client.post(change_url(node), data).status_code == 302
    node.refresh_from_db()
    assert node.exporters == {"sys-exporter": 29101}
    assert type(node.exporters["sys-exporter"]) is int  # the page's links print it


def test_action_deregister(admin_client, make_node):
    nodes = [make_node(), make_node()]

    response = run_action(admin_client, "deregister", nodes)

    assert "Deregistered 2 node(s)." in response.content.decode()
    assert not Node.objects.exists()
    events = NodeEvent.objects.filter(kind=EventKind.DEREGISTERED)
    assert {e.actor for e in events} == {"admin:admin"} and events.count() == 2


def test_actions_maintenance_on_and_off(admin_client, make_node):
    node = make_node()

    run_action(admin_client, "maintenance_on", [node])
    node.refresh_from_db()
    assert node.maintenance is True
    began = node.maintenance_changed_at
    run_action(admin_client, "maintenance_off", [node])
    node.refresh_from_db()
    assert node.maintenance is False
    assert node.maintenance_changed_at > began
    kinds = list(node.events.order_by("id").values_list("kind", flat=True))
    assert kinds == [EventKind.MAINTENANCE_ON, EventKind.MAINTENANCE_OFF]


def test_action_reset_node_key(admin_client, make_node):
    node = make_node(key="old-key")

    run_action(admin_client, "reset_node_key", [node])

    node.refresh_from_db()
    assert node.node_key_hash == ""
    assert not node_key_matches(node, "old-key")
    assert node.events.get(kind=EventKind.KEY_RESET).actor == "admin:admin"


def test_delete_in_the_admin_leaves_a_deregistered_event(admin_client, make_node):
    node = make_node("gpu-01")

    response = admin_client.post(f"{CHANGELIST}{node.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Node.objects.exists()
    assert NodeEvent.objects.get(kind=EventKind.DEREGISTERED).hostname == "gpu-01"


def test_event_text_is_escaped_in_the_change_form_and_event_list(admin_client, make_node):
    node = make_node("gpu-01")
    record_event(node, EventKind.EDITED, "<script>alert('x')</script>", actor="<b>mallory</b>")

    page = admin_client.get(change_url(node)).content.decode()
    events = admin_client.get("/admin/inventory/nodeevent/").content.decode()

    for text in (page, events):
        assert "<script>alert" not in text
        assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
        assert "<b>mallory</b>" not in text


def test_change_form_shows_the_latest_fifty_events_and_still_saves(admin_client, make_node):
    node = make_node("gpu-01")
    for i in range(60):
        record_event(node, EventKind.ONLINE, f"probe event {i:02d}", actor="probe")

    page = admin_client.get(change_url(node)).content.decode()
    data = form_fields(page)
    data["maintenance"] = "on"
    response = admin_client.post(change_url(node), data)

    assert "probe event 59" in page and "probe event 10" in page
    assert "probe event 09" not in page
    assert response.status_code == 302
    node.refresh_from_db()
    assert node.maintenance is True
    assert NodeEvent.objects.filter(node=node, kind=EventKind.ONLINE).count() == 60


def test_gpu_verdicts_and_fault_history_are_shown_read_only(admin_client, make_node):
    from inventory.models import GpuFault, GpuHealth

    node = make_node("gpu-sick", health_state="unhealthy", health_action="reboot")
    GpuHealth.objects.create(node=node, index=3, uuid="GPU-d", serial="1650", state="unhealthy")
    GpuFault.objects.create(gpu="1650", fault="xid:79", boot_id="b-1", node=node,
                            hostname="gpu-sick")  # fmt: skip

    page = admin_client.get(f"/admin/inventory/node/{node.pk}/change/").content.decode()
    assert "GPU verdict (set by the probe)" in page
    gpus = admin_client.get("/admin/inventory/gpuhealth/").content.decode()
    faults = admin_client.get("/admin/inventory/gpufault/").content.decode()
    assert "GPU-d" in gpus and "xid:79" in faults
    assert admin_client.get("/admin/inventory/gpuhealth/add/").status_code == 403


def test_deleting_fault_history_in_the_admin_says_so_and_has_the_node_judged_afresh(
    admin_client, make_node
):
    from inventory.models import GpuFault, GpuHealth

    node = make_node("gpu-fixed", health_state="unhealthy", health_action="inspect_hardware",
                     health_digest="d41d8cd9")  # fmt: skip
    rows = [
        GpuFault.objects.create(
            gpu="1650",
            fault="xid:79",
            boot_id=f"b-{n}",
            node=node,
            hostname="gpu-fixed",
            gpu_index=3,
        )
        for n in (1, 2)
    ]
    other = make_node("gpu-other", health_digest="abc")
    # GPU 1650 has moved to gpu-moved since its faults were seen: judged afresh too.
    moved = make_node("gpu-moved", health_digest="fff")
    GpuHealth.objects.create(node=moved, index=0, serial="1650")
    GpuFault.objects.create(gpu="9999", fault="xid:48", boot_id="b-1", node=other,
                            hostname="gpu-other", gpu_index=0)  # fmt: skip

    response = admin_client.post(
        "/admin/inventory/gpufault/",
        {"action": "delete_selected", "_selected_action": [r.pk for r in rows], "post": "yes"},
    )

    assert response.status_code == 302
    assert list(GpuFault.objects.values_list("gpu", flat=True)) == ["9999"]
    node.refresh_from_db()
    other.refresh_from_db()
    moved.refresh_from_db()
    assert other.health_digest == "abc"  # untouched; the two others' say "judge afresh"
    assert {node.health_digest[:10], moved.health_digest[:10]} == {"forgotten:"}
    event = NodeEvent.objects.get(node=node, kind=EventKind.FAULTS_FORGOTTEN)
    assert event.actor == "admin:admin"
    assert event.message.startswith("2 boot(s) of GPU fault history forgotten (GPU 3 xid:79)")
