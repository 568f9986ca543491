"""The node page: status and why, per-exporter health, history, chart slots."""

from __future__ import annotations

import pytest
from django.test import Client

from inventory.choices import EventKind, GpuVendor
from inventory.models import NodeEvent
from macweb.dashboard import queries
from testkit.factories import offline_node, online_gpu_node

pytestmark = pytest.mark.django_db


def test_it_needs_a_login():
    node = online_gpu_node()
    response = Client().get(f"/nodes/{node.pk}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_shows_status_diagnosis_fix_exporters_and_history(client_user):
    node = offline_node(
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
    for name in (
        "cpu",
        "memory",
        "gpu_util",
        "gpu_memory",
        "gpu_temp",
        "gpu_power",
        "gpu_errors",
        "rdma",
    ):
        assert f'/nodes/{node.pk}/charts/{name}.json"' in html
    assert "vendor/uplot/uPlot.iife.min.js" in html


def _target_badges(html: str) -> dict[str, str]:
    """{service: what the Prometheus column (the row's fourth cell) says}."""
    import re

    badges = {}
    for name, row in re.findall(r'<tr data-service="([^"]+)"(.*?)</tr>', html, flags=re.S):
        cell = re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)[3]
        badges[name] = re.sub(r"<[^>]+>", "", cell).strip()
    return badges


def test_it_shows_which_exporters_prometheus_still_scrapes_when_forwarding_is_off(client_user):
    node = offline_node(
        exporters={"sys-exporter": 29101, "nic-exporter": 29500, "dcgm-exporter": 29150},
        exporter_health={"sys-exporter": False, "nic-exporter": True, "dcgm-exporter": False},
    )

    html = client_user.get(f"/nodes/{node.pk}/").content.decode()

    badges = _target_badges(html)
    assert badges["nic-exporter"] == "scraped"
    assert badges["sys-exporter"] == "missing"
    assert badges["dcgm-exporter"] == "missing"
    assert badges["bmc-agent"] == "-"  # not registered
    assert badges["mango-sdk-agent"] == "-"  # an API, never a Prometheus target
    assert 'title="listed in nic-exporter.json"' in html


def test_an_online_node_is_scraped_on_every_exporter_that_answered(client_user):
    node = online_gpu_node(
        exporter_health={"sys-exporter": True, "nic-exporter": True, "dcgm-exporter": False},
    )

    badges = _target_badges(client_user.get(f"/nodes/{node.pk}/").content.decode())

    assert (badges["sys-exporter"], badges["nic-exporter"]) == ("scraped", "scraped")
    assert badges["dcgm-exporter"] == "missing"


def test_a_node_without_gpus_gets_no_gpu_charts(client_user):
    node = online_gpu_node(gpu_vendor=GpuVendor.NONE, gpu_count=0)
    html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    assert "gpu_util.json" not in html
    assert "No GPU charts: this node reports no GPUs." in html


def test_an_unknown_node_is_404(client_user):
    assert client_user.get("/nodes/424242/").status_code == 404


def test_staff_see_the_admin_link(client_staff, client_user):
    node = online_gpu_node()
    link = f'href="/admin/inventory/node/{node.pk}/change/"'
    assert link in client_staff.get(f"/nodes/{node.pk}/").content.decode()
    assert link not in client_user.get(f"/nodes/{node.pk}/").content.decode()


def test_it_shows_the_agent_s_network_mode(client_user):
    host = online_gpu_node(agent_network="host")
    older = online_gpu_node(agent_network="")
    shown = client_user.get(f"/nodes/{host.pk}/").content.decode()
    assert '<dt>Network</dt><dd id="node-network"' in shown
    assert ">host network</dd>" in shown
    unknown = client_user.get(f"/nodes/{older.pk}/").content.decode()
    assert ">unknown (an agent older than the mode: judged as bridge)</dd>" in unknown


def test_it_shows_each_gpus_verdict_its_evidence_and_the_fix(client_user):
    from django.utils.html import escape

    from contract.verdicts import Evidence, HealthAction, HealthState
    from inventory.models import GpuHealth

    lost = Evidence(
        "xid", "79", "XID 79: GPU has fallen off the bus", HealthState.UNHEALTHY,
        HealthAction.REBOOT, 1_781_000_000.0, "3", "GPU-d", "1650924060123",
    )  # fmt: skip
    node = online_gpu_node(
        health_state="unhealthy", health_action="reboot", health_streak=2,
        health_evidence=lost.words() + "; reboot",
    )  # fmt: skip
    GpuHealth.objects.create(
        node=node, index=3, uuid="GPU-d", serial="1650924060123", state="unhealthy",
        action="reboot", evidence=[lost.as_dict()],
    )  # fmt: skip
    GpuHealth.objects.create(node=node, index=0, uuid="GPU-a")
    html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    assert f'<p id="node-health-evidence">{escape(lost.words())}; reboot</p>' in html
    assert 'id="node-health">Unhealthy</span>' in html and "read in 2 sweeps in a row" in html
    assert "Drain the node and reboot it" in html
    assert '<tr class="gpu-unhealthy" data-gpu="3">' in html
    assert f"<li>{escape(lost.words(gpu=False))}</li>" in html
    assert '<td class="mono">1650924060123</td>' in html


def test_a_node_without_gpus_has_no_gpu_health_panel(client_user):
    node = online_gpu_node(gpu_vendor=GpuVendor.NONE, gpu_count=0)
    assert 'id="gpu-health"' not in client_user.get(f"/nodes/{node.pk}/").content.decode()


def test_it_says_who_drained_the_node_in_slurm_and_the_reason(client_user, settings):
    from contract.drainpolicy import DrainMode

    reason = "MAC: GPU 3 (UUID GPU-d) XID 79: GPU has fallen off the bus at 14:02:11; reboot"
    node = online_gpu_node(
        health_state="unhealthy", health_action="reboot", health_evidence=reason[5:],
        slurm_state="draining", slurm_hold="mac", slurm_reason=reason,
    )  # fmt: skip
    html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    assert 'id="node-slurm"' not in html  # the drain is off: no Slurm line
    settings.SLURM_DRAIN = DrainMode.ON
    html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    assert (
        'In Slurm: <span id="node-slurm-state">drained by MAC (draining)</span>, reason '
        f'<q class="mono" id="node-slurm-reason">{reason}</q>'
    ) in html
    assert f'id="node-slurm-badge" title="draining: {reason}">drained by MAC</span>' in html
    admin = online_gpu_node(slurm_state="drained", slurm_hold="admin", slurm_reason="PSU swap")
    html = client_user.get(f"/nodes/{admin.pk}/").content.decode()
    assert "drained by admin (drained)</span>, reason <q" in html and ">PSU swap</q>" in html
    idle = online_gpu_node(slurm_state="idle")
    assert "idle, in service" in client_user.get(f"/nodes/{idle.pk}/").content.decode()


def test_the_gpu_rows_alone_are_what_the_page_shows_for_its_refresh(client_user):
    from django.utils.html import escape

    from contract.verdicts import Evidence, HealthAction, HealthState
    from inventory.models import GpuHealth

    hot = Evidence(
        "xid", "48", "XID 48: <double-bit> ECC error", HealthState.UNHEALTHY,
        HealthAction.RESET_GPU, 1_781_000_000.0, "1", "GPU-b", "",
    )  # fmt: skip
    node = online_gpu_node(health_state="unhealthy", health_action="reset_gpu")
    GpuHealth.objects.create(node=node, index=0, uuid="GPU-a")
    GpuHealth.objects.create(
        node=node, index=1, uuid="GPU-b", state="unhealthy", action="reset_gpu",
        evidence=[hot.as_dict()],
    )  # fmt: skip
    page = client_user.get(f"/nodes/{node.pk}/").content.decode()
    assert f'<tbody id="gpu-rows" data-url="/nodes/{node.pk}/gpus.html">' in page

    response = client_user.get(f"/nodes/{node.pk}/gpus.html")

    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    rows = response.content.decode()
    assert rows.count("<tr ") == 2 and '<tr class="gpu-unhealthy" data-gpu="1">' in rows
    assert f"<li>{escape(hot.words(gpu=False))}</li>" in rows  # text, not markup
    # The repair, ready to paste on the node: this GPU's ("GPU-b" is no UUID NVML gives:
    # the index names it).
    assert '<code class="gpu-command">sudo mac gpu reset 1</code>' in rows
    assert rows.count("gpu-command") == 1  # the healthy GPU has none
    # The rows are the page's own (one template renders both).
    body = page.split('<tbody id="gpu-rows"', 1)[1].split(">", 1)[1].split("</tbody>", 1)[0]
    assert body.split() == rows.split()


def test_the_gpu_rows_answer_anonymous_and_unknown_with_json(client_user):
    node = online_gpu_node()
    anonymous = Client().get(f"/nodes/{node.pk}/gpus.html")
    assert anonymous.status_code == 401
    assert anonymous.json() == {"detail": ["log in first (/accounts/login/)"]}
    missing = client_user.get("/nodes/999999/gpus.html")
    assert (missing.status_code, missing.json()) == (404, {"node": ["no node with id 999999"]})
    assert client_user.post(f"/nodes/{node.pk}/gpus.html").status_code == 405


def test_a_gpu_node_without_a_verdict_yet_has_its_table_hidden_for_the_refresh(client_user):
    node = online_gpu_node(gpu_count=8)
    html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    assert '<div class="table-scroll" id="gpu-table" hidden>' in html
    assert f'<tbody id="gpu-rows" data-url="/nodes/{node.pk}/gpus.html">' in html
    assert "No verdict read yet" in html


@pytest.mark.parametrize(
    ("item", "shown"),
    [
        ({"detail": "XID 999: a new kind", "state": "melted", "action": "reboot"},
         "XID 999: a new kind"),
        ({"detail": "ECC burst", "state": "unhealthy", "action": "replace_psu"}, "ECC burst"),
        ({"detail": "XID 79", "state": "unhealthy", "action": "reboot", "at": "soon"}, "XID 79"),
        ({"detail": "XID 79", "state": "unhealthy", "action": "reboot", "at": 1e300}, "XID 79"),
        ("fell off the bus", "fell off the bus"),
        (["a", "list"], "[&#x27;a&#x27;, &#x27;list&#x27;]"),
    ],
)  # fmt: skip
def test_gpu_evidence_this_release_cannot_read_is_shown_as_text(client_user, item, shown):
    """Evidence written by another release or by hand: its words, not a 500."""
    from inventory.models import GpuHealth

    node = online_gpu_node(health_state="unhealthy", health_action="reboot")
    GpuHealth.objects.create(
        node=node, index=2, uuid="GPU-c", state="unhealthy", action="reboot", evidence=[item]
    )
    page = client_user.get(f"/nodes/{node.pk}/")
    rows = client_user.get(f"/nodes/{node.pk}/gpus.html")
    assert page.status_code == rows.status_code == 200
    assert f"<li>{shown}</li>" in page.content.decode()
    assert f"<li>{shown}</li>" in rows.content.decode()


STRICT_UUID = "GPU-5d2f7b1e-8c3a-4f6e-9b0d-2a7c1e4f8b93"


def reset_gpu_node(**fields):
    """A node whose GPU 1 (NVML's UUID) and GPU 6 (a UUID NVML never gives: a shell
    command) need a reset, GPU 0 healthy; the last added by hand to catch escaping."""
    from inventory.models import GpuHealth

    node = online_gpu_node(health_state="unhealthy", health_action="reset_gpu", **fields)
    GpuHealth.objects.create(node=node, index=0, uuid="GPU-0")
    for index, uuid in ((1, STRICT_UUID), (6, "GPU-1;curl x|sh")):
        GpuHealth.objects.create(
            node=node, index=index, uuid=uuid, state="unhealthy", action="reset_gpu"
        )
    return node


def test_the_fix_box_names_each_gpu_that_needs_a_reset(client_user):
    """One `mac gpu reset` line per GPU needing it, by NVML's UUID or else its index: the
    box is pasted into a root shell, so a UUID in another form never reaches it."""
    from django.utils.html import escape

    node = reset_gpu_node()
    html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    box = html.split('<pre class="fix-block" id="node-health-fix">', 1)[1].split("</pre>", 1)[0]
    assert (
        "Drain the node and wait for its jobs, then on the node:\n"
        f"  sudo mac gpu reset {STRICT_UUID}\n"
        "  sudo mac gpu reset 6\n"
        "It stops MAC&#x27;s own GPU services"
    ) in box
    assert f"sudo nvidia-smi -r -i {STRICT_UUID}" in box and "sudo nvidia-smi -r -i 6" in box
    assert "<gpu>" not in box and "&lt;gpu&gt;" not in box and "curl" not in box
    assert "amd-smi" not in box  # an NVIDIA node: AMD's line left out
    assert "mac gpu reset 0" not in box  # the healthy GPU
    assert box == escape(queries.health_fix(node))


def test_the_fix_box_of_an_action_without_a_gpu_in_it_is_the_vocabularys(client_user):
    from contract.verdicts import ACTION_FIXES, HealthAction

    node = reset_gpu_node()
    node.health_action = HealthAction.REBOOT
    node.save(update_fields=["health_action"])
    assert queries.health_fix(node) == ACTION_FIXES[HealthAction.REBOOT]
    node.health_action = HealthAction.NONE
    node.save(update_fields=["health_action"])
    html = client_user.get(f"/nodes/{node.pk}/").content.decode()
    assert '<div id="node-health-fix-box" hidden>' in html


def test_fleet_json_carries_the_gpu_naming_fix_for_the_node_page_to_resync(client_user):
    node = reset_gpu_node(hostname="gpu-resync")
    other = online_gpu_node(hostname="gpu-resync-healthy")
    rows = {
        row["id"]: row for row in client_user.get("/fleet.json?search=gpu-resync").json()["nodes"]
    }
    assert rows[node.pk]["health_fix"] == queries.health_fix(node)
    assert "health_fix" not in rows[other.pk]


def test_the_fix_names_its_gpus_by_their_own_vendor_when_the_nodes_says_none():
    """The node's discovery found no GPU ("none"), its exporter judged NVIDIA ones: their
    rows say NVIDIA, so AMD's line (which takes an index, never a UUID) is left out."""
    from inventory.models import GpuHealth

    node = reset_gpu_node(gpu_vendor=GpuVendor.NONE)
    GpuHealth.objects.filter(node=node).update(vendor=GpuVendor.NVIDIA)
    fix = queries.health_fix(node)
    assert f"sudo nvidia-smi -r -i {STRICT_UUID}" in fix
    assert "amd-smi" not in fix

    GpuHealth.objects.filter(node=node).update(vendor=GpuVendor.AMD)
    node.gpu_vendor = GpuVendor.NVIDIA  # the GPUs' rows still win
    fix = queries.health_fix(node)
    assert "sudo amd-smi reset --gpureset -g " in fix and "nvidia-smi -r" not in fix

    GpuHealth.objects.filter(node=node).update(vendor=GpuVendor.NONE)
    node.gpu_vendor = GpuVendor.NONE  # nothing says: both vendors' lines
    fix = queries.health_fix(node)
    assert f"sudo nvidia-smi -r -i {STRICT_UUID}" in fix and "amd-smi reset" in fix
