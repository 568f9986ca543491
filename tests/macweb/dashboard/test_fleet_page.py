"""The fleet page and its JSON twin: login, counts, filters, paging, escaping."""

from __future__ import annotations

import pytest
from django.test import Client

from inventory.choices import GpuVendor, NodeStatus
from macweb.dashboard import queries, views
from testkit.factories import bulk_nodes, offline_node, online_gpu_node
from testkit.ports import free_port

pytestmark = pytest.mark.django_db


def test_it_sends_anonymous_users_to_the_login_page():
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/")


def test_it_answers_401_json_to_anonymous_scripts():
    response = Client().get("/fleet.json")
    assert response.status_code == 401
    assert "detail" in response.json()


def test_login_page_is_styled_and_logs_in(user):
    client = Client()
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert b"Log in to MAC" in page.content
    assert b"dashboard/css/mac.css" in page.content
    credentials = {"username": "operator", "password": "operator-pass"}
    response = client.post("/accounts/login/", credentials)
    assert response.status_code == 302
    assert client.get("/").status_code == 200


def test_it_counts_by_status_maintenance_vendor_and_gpu_verdict(client_user):
    online_gpu_node(gpu_vendor=GpuVendor.NVIDIA, health_state="unhealthy", health_action="reboot")
    online_gpu_node(gpu_vendor=GpuVendor.AMD, maintenance=True, health_state="degraded")
    offline_node(gpu_vendor=GpuVendor.AMD, health_action="restart_app")
    online_gpu_node(status=NodeStatus.UNKNOWN, gpu_vendor=GpuVendor.NONE, gpu_count=0)
    counts = client_user.get("/fleet.json").json()["counts"]
    assert counts == {
        "total": 4,
        "maintenance": 1,
        "status": {"unknown": 1, "online": 2, "offline": 1},
        "vendor": {"none": 1, "nvidia": 1, "amd": 2},
        "health": {"healthy": 2, "degraded": 1, "unhealthy": 1},
        "needs_action": 1,
        "drained": {"mac": 0, "admin": 0},
    }
    page = client_user.get("/").content.decode()
    assert 'data-count="status.offline">1<' in page
    assert 'data-count="vendor.amd">2<' in page
    assert 'data-count="health.unhealthy">1<' in page
    assert 'data-count="needs_action">1<' in page


def test_the_needs_action_filter_and_the_verdict_in_each_row(client_user):
    sick = online_gpu_node(
        hostname="gpu-sick", health_state="unhealthy", health_action="reboot",
        health_evidence="GPU 3 (UUID GPU-d) XID 79: GPU has fallen off the bus at 14:02:11; reboot",
    )  # fmt: skip
    online_gpu_node(hostname="gpu-app", health_action="restart_app")
    online_gpu_node(hostname="gpu-fine")
    page = client_user.get("/", {"needs_action": "true"})
    html = page.content.decode()
    assert page.status_code == 200 and "gpu-sick" in html and "gpu-app" not in html
    assert 'class="badge badge-health-unhealthy" title="GPU 3 (UUID GPU-d) XID 79' in html
    assert '<span class="health-action needs-action">reboot the node</span>' in html
    rows = client_user.get("/fleet.json", {"health": "unhealthy"}).json()["nodes"]
    assert [row["id"] for row in rows] == [sick.pk]
    assert rows[0]["health_action_text"] == "reboot the node" and rows[0]["needs_action"]
    assert client_user.get("/", {"needs_action": "maybe"}).status_code == 400


def test_drained_nodes_show_who_drained_them_and_the_filter_finds_them(client_user, settings):
    from contract.drainpolicy import DrainMode

    settings.SLURM_DRAIN = DrainMode.ON
    reason = "MAC: GPU 3 (UUID GPU-d) XID 79: GPU has fallen off the bus at 14:02:11; reboot"
    by_mac = online_gpu_node(
        hostname="gpu-mac", slurm_state="drained", slurm_hold="mac", slurm_reason=reason
    )
    online_gpu_node(
        hostname="gpu-admin", slurm_state="down", slurm_hold="admin", slurm_reason="PSU swap"
    )
    online_gpu_node(hostname="gpu-busy", slurm_state="mixed")
    html = client_user.get("/", {"drained": "mac"}).content.decode()
    assert "gpu-mac" in html and "gpu-admin" not in html and "gpu-busy" not in html
    assert f'class="badge badge-slurm-mac" title="drained: {reason}">drained by MAC<' in html
    assert 'data-count="drained.mac">1<' in html and 'data-count="drained.admin">1<' in html
    assert '<option value="admin">Drained by admin</option>' in html
    rows = client_user.get("/fleet.json", {"drained": ["mac", "admin"]}).json()["nodes"]
    assert {row["hostname"]: row["slurm_hold_text"] for row in rows} == {
        "gpu-mac": "drained by MAC",
        "gpu-admin": "drained by admin",
    }
    assert rows[0]["slurm_reason"] == reason or rows[1]["slurm_reason"] == reason
    assert client_user.get("/", {"drained": "someone"}).status_code == 400
    api = client_user.get("/api/v1/nodes/", {"drained": "mac"}).json()["results"]
    assert [node["id"] for node in api] == [by_mac.pk] and api[0]["slurm_reason"] == reason


def test_offline_rows_say_the_reason_and_the_diagnosis_with_its_fix(client_user):
    node = offline_node(hostname="gpu-fwd")
    row = client_user.get("/fleet.json").json()["nodes"][0]
    assert row["hostname"] == "gpu-fwd"
    assert row["status_reason_text"] == "sys-exporter timed out"
    info = queries.describe_diagnosis(node.diagnosis)
    assert row["diagnosis_info"] == info
    assert info["text"]
    html = client_user.get("/").content.decode()
    assert "sys-exporter timed out: no answer within 3.0 s" in html
    assert info["text"] in html


def test_it_filters_by_status_vendor_maintenance_and_search(client_user):
    online_gpu_node(hostname="a-nv", gpu_vendor=GpuVendor.NVIDIA)
    online_gpu_node(hostname="b-amd", gpu_vendor=GpuVendor.AMD, maintenance=True)
    offline_node(hostname="c-down", ip="192.0.2.77")

    def names(query: str) -> list[str]:
        return [r["hostname"] for r in client_user.get(f"/fleet.json?{query}").json()["nodes"]]

    assert names("status=offline") == ["c-down"]
    assert names("gpu_vendor=amd") == ["b-amd"]
    assert names("maintenance=true") == ["b-amd"]
    assert names("maintenance=false") == ["a-nv", "c-down"]
    assert names("search=AMD") == ["b-amd"]
    assert names("search=192.0.2") == ["c-down"]
    assert names("status=online&gpu_vendor=nvidia") == ["a-nv"]
    assert names("status=online&status=offline&gpu_vendor=nvidia&gpu_vendor=none") == [
        "a-nv",
        "c-down",
    ]


def test_the_page_and_the_api_filter_with_one_filterset(client_user, auth_client):
    online_gpu_node(hostname="a-nv", gpu_vendor=GpuVendor.NVIDIA, labels={"rack": "a1"})
    online_gpu_node(hostname="b-amd", gpu_vendor=GpuVendor.AMD, maintenance=True)
    offline_node(hostname="c-down", ip="192.0.2.77")
    for query in [
        "status=offline",
        "gpu_vendor=amd&maintenance=true",
        "maintenance=false&search=a-",
        "label=rack=a1",
        "search=192.0.2",
        "ip=192.0.2.77",
    ]:
        page = [r["hostname"] for r in client_user.get(f"/fleet.json?{query}").json()["nodes"]]
        api = [n["hostname"] for n in auth_client.get(f"/api/v1/nodes/?{query}").json()["results"]]
        assert page == api, query


def test_the_form_s_any_options_are_no_filter(client_user):
    online_gpu_node(hostname="a-nv")
    response = client_user.get("/?search=&status=&gpu_vendor=&maintenance=")
    assert response.status_code == 200
    assert response.content.decode().count('class="node-row') == 1


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("/?vendor=amd&maintenance=yes", "/?gpu_vendor=amd&maintenance=true"),
        ("/?q=gpu&maintenance=no&page=2", "/?search=gpu&maintenance=false&page=2"),
        ("/fleet.json?vendor=nvidia", "/fleet.json?gpu_vendor=nvidia"),
    ],
)
def test_links_with_the_page_s_old_parameters_go_to_the_same_filter(client_user, old, new):
    response = client_user.get(old)
    assert response.status_code == 302
    assert response["Location"] == new


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=sleeping", "status"),
        ("gpu_vendor=intel", "gpu_vendor"),
        ("page=zero", "page"),
        ("maintenance=maybe", "maintenance"),
        ("label=rack", "label"),
        ("ip=10.0.0", "ip"),
        ("ip=fe80::1%25eth0", "ip"),  # a zone id: its "%" must not reach %-formatting
        ("search=" + "x" * 254, "search"),
        ("search=a%00b", "search"),
        ("page=-1", "page"),
        ("page=" + "9" * 5000, "page"),  # past what int() takes: a 400, not a 500
    ],
)
def test_bad_filters_get_a_400_naming_the_parameter(client_user, auth_client, query, field):
    response = client_user.get(f"/fleet.json?{query}")
    assert response.status_code == 400
    assert field in response.json()
    page = client_user.get(f"/?{query}", follow=True)
    assert page.status_code == 400
    assert f"Filter not applied: {field}:" in page.content.decode()
    if field != "page":
        api = auth_client.get(f"/api/v1/nodes/?{query}")
        assert api.status_code == 400
        assert field in api.json()


def test_it_pages_so_the_whole_fleet_never_ships(client_user):
    bulk_nodes(250)
    first = client_user.get("/fleet.json").json()
    assert (first["matching"], first["num_pages"], len(first["nodes"])) == (250, 3, 100)
    last = client_user.get("/fleet.json?page=3").json()
    assert len(last["nodes"]) == 50
    assert last["nodes"][-1]["hostname"] == "bulk-00249"
    past_end = client_user.get("/fleet.json?page=99").json()
    assert past_end["page"] == 3
    html = client_user.get("/?page=2").content.decode()
    assert html.count('class="node-row') == 100
    assert 'href="?page=3" rel="next"' in html
    assert 'href="?" rel="prev"' in html or 'href="?page=1" rel="prev"' in html


def test_paging_links_keep_the_filters(client_user):
    bulk_nodes(120, gpu_vendor=GpuVendor.AMD)
    html = client_user.get("/?gpu_vendor=amd&search=bulk").content.decode()
    assert 'href="?gpu_vendor=amd&amp;search=bulk&amp;page=2" rel="next"' in html


def test_it_escapes_what_agents_sent(client_user):
    offline_node(hostname="evil", status_detail='<script>alert("x")</script>')
    html = client_user.get("/").content.decode()
    assert '<script>alert("x")</script>' not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html


def test_staff_get_admin_links_and_others_do_not(client_user, client_staff):
    node = online_gpu_node()
    admin_url = f"/admin/inventory/node/{node.pk}/change/"
    assert views.admin_change_url_template() == "/admin/inventory/node/{id}/change/"
    staff_page = client_staff.get("/").content.decode()
    user_page = client_user.get("/").content.decode()
    assert admin_url in staff_page
    assert '"admin_url": "/admin/inventory/node/{id}/change/"' in staff_page
    assert admin_url not in user_page


def test_empty_fleet_says_how_to_add_a_node(client_user):
    html = client_user.get("/").content.decode()
    assert "mac start agent" in html


def test_rows_carry_the_agent_s_network_mode_in_the_address_tooltip(client_user):
    online_gpu_node(hostname="a-host", agent_network="host")
    online_gpu_node(hostname="b-bridge", agent_network="bridge")
    rows = client_user.get("/fleet.json").json()["nodes"]
    assert [(r["agent_network"], r["agent_network_text"]) for r in rows] == [
        ("host", "host network"),
        ("bridge", "bridge (published ports)"),
    ]
    html = client_user.get("/").content.decode()
    assert 'title="Agent network: host network">' in html
    assert 'title="Agent network: bridge (published ports)">' in html


def test_the_header_links_to_prometheus_through_the_front_door_and_to_the_alerts(client_user):
    page = client_user.get("/").content.decode()
    assert 'href="/prometheus/targets"' in page
    # Debian's Alertmanager has no web UI: people read its alerts on the dashboard.
    assert 'href="/alerts/"' in page and 'href="/alertmanager/"' not in page


def test_it_filters_the_nodes_by_a_firing_alert(client_user, settings, tmp_path):
    import datetime as dt
    import shutil

    from alerting import services
    from alerting.client import Alertmanager
    from testkit.alerting import AlertmanagerServer

    if not shutil.which("prometheus-alertmanager"):
        pytest.skip("Debian's prometheus-alertmanager is not installed")
    down = offline_node(hostname="c-down", ip="192.0.2.77")
    online_gpu_node(hostname="a-nv")
    settings.ALERTMANAGER_DIR = tmp_path / "am"
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    page = client_user.get("/?alert=MacNodeOffline")
    assert page.status_code == 400 and "alerts unavailable: cannot reach" in page.content.decode()
    assert client_user.get("/fleet.json?alert=Mac Node").json() == {
        "alert": ["Use an alert name, e.g. alert=MacNodeOffline."]
    }

    services.apply_channels(reload=False)
    manager = AlertmanagerServer(services.config_path(), tmp_path / "am-data").start()
    try:
        settings.ALERTMANAGER_URL = manager.url
        now = dt.datetime.now(dt.UTC).isoformat()
        labels = {"alertname": "MacNodeOffline", "severity": "critical", "cluster_name": "mac"}
        Alertmanager.from_settings().post_alerts(
            [{"labels": {**labels, "node": str(down.pk), "hostname": "c-down"}, "startsAt": now}]
        )

        def names(query: str) -> list[str]:
            nodes = client_user.get(f"/fleet.json?{query}").json()["nodes"]
            return [row["hostname"] for row in nodes]

        assert names("alert=MacNodeOffline") == ["c-down"]
        assert names("alert=GpuXidError") == []
        html = client_user.get("/?alert=MacNodeOffline").content.decode()
        assert 'name="alert" value="MacNodeOffline"' in html
    finally:
        manager.stop()


def test_a_diagnosis_this_release_does_not_know_is_shown_as_its_code(client_user):
    """A code left by a downgrade or a hand edit: the pages show it rather than a 500."""
    from inventory.models import Node

    node = offline_node(hostname="gpu-old")
    Node.objects.filter(pk=node.pk).update(diagnosis="nic_down")

    fleet = client_user.get("/fleet.json")
    assert fleet.status_code == 200
    info = fleet.json()["nodes"][0]["diagnosis_info"]
    assert info == {"code": "nic_down", "label": "nic_down",
                    "text": "Unknown diagnosis 'nic_down'.", "fix": ""}  # fmt: skip
    page = client_user.get("/")
    assert page.status_code == 200 and "· nic_down</span>" in page.content.decode()
    assert client_user.get(f"/nodes/{node.pk}/").status_code == 200


def test_the_alert_filter_asks_alertmanager_inside_its_bulkhead(client_user, settings):
    """`?alert=` waits on Alertmanager in a request thread, as /alerts.json does: past the
    bulkhead it is not asked, and the form says why."""
    from alerting import bulkheads
    from testkit.fakehttp import JsonHandler, serving

    asked: list[str] = []

    class Manager(JsonHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_json(200, [])

    settings.BULKHEAD_ALERTMANAGER = 1
    bulkheads.ALERTMANAGER.reset()
    try:
        with serving(Manager) as url:
            settings.ALERTMANAGER_URL = url
            with bulkheads.ALERTMANAGER.slot():  # another request waits on Alertmanager
                page = client_user.get("/?alert=MacNodeOffline")
                answer = client_user.get("/fleet.json?alert=MacNodeOffline")
            assert asked == []
            assert client_user.get("/fleet.json?alert=MacNodeOffline").status_code == 200
    finally:
        bulkheads.ALERTMANAGER.reset()
    assert page.status_code == answer.status_code == 400
    words = (
        "alerts unavailable: not asked: 1 request(s) of this API worker already wait on "
        "Alertmanager (MAC_BULKHEAD_ALERTMANAGER=1); it answers slowly or not at all, retry "
        "shortly"
    )
    assert answer.json() == {"alert": [words]}
    assert f"alert: {words}" in page.content.decode()
    assert len(asked) == 1  # once the slot is free, it is asked
