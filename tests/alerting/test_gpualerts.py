"""The master posts its GPU verdict alerts to a real Alertmanager (alerting.gpualerts)."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from alerting import gpualerts, nodealerts
from contract.verdicts import Evidence, HealthAction, HealthState
from inventory.models import GpuHealth, Node
from testkit.factories import online_gpu_node
from tests.alerting.conftest import needs_alertmanager

pytestmark = [pytest.mark.django_db, needs_alertmanager]

AT = 1_781_000_000.0


@pytest.fixture(autouse=True)
def fresh_state():
    keys = (nodealerts.POSTED_KEY, nodealerts.STATS_KEY, nodealerts.LOCK_KEY, gpualerts.POSTED_KEY,
            nodealerts.ENDED_KEY, gpualerts.ENDED_KEY)  # fmt: skip
    cache.delete_many(keys)
    yield
    cache.delete_many(keys)


def verdict(node: Node, index: int, *evidence: Evidence) -> GpuHealth:
    state = max((e.state for e in evidence), key=lambda s: s.severity, default=HealthState.HEALTHY)
    action = max((e.action for e in evidence), key=lambda a: a.severity, default=HealthAction.NONE)
    return GpuHealth.objects.create(
        node=node, index=index, uuid=f"GPU-{index}", serial=f"16509240601{index:02d}",
        vendor="nvidia", state=state, action=action, evidence=[e.as_dict() for e in evidence],
    )  # fmt: skip


def xid(code: int, state: HealthState, action: HealthAction, detail: str, gpu: int = 3) -> Evidence:
    return Evidence("xid", str(code), detail, state, action, AT, str(gpu), f"GPU-{gpu}",
                    f"16509240601{gpu:02d}")  # fmt: skip


XID79 = xid(79, HealthState.UNHEALTHY, HealthAction.REBOOT, "XID 79: GPU has fallen off the bus")


def held(alertmanager, hostname: str) -> list[dict]:
    return [
        a
        for a in alertmanager.get("/api/v2/alerts?active=true&silenced=true&inhibited=true")
        if a["labels"].get("hostname") == hostname
    ]


def about(host: str, alertname: str, status: str):
    def match(body: dict) -> bool:
        return any(
            a["labels"].get("hostname") == host
            and a["labels"]["alertname"] == alertname
            and a["status"] == status
            for a in body["alerts"]
        )

    return match


def test_an_unhealthy_gpu_pages_naming_the_gpu_its_evidence_and_the_action(
    alertmanager, node_alert_hook, am_settings
):
    am_settings.PUBLIC_URL = "http://mac.example.test:28080"
    node = online_gpu_node("gpu-41", "10.0.0.41")
    verdict(node, 3, XID79)
    verdict(node, 0)  # healthy: no alert

    post = nodealerts.post_node_alerts()

    assert post.error == "" and post.gpus_firing == [f"{node.pk}/3/MacGpuUnhealthy"]
    [alert] = held(alertmanager, "gpu-41")
    assert alert["labels"] == {
        "alertname": "MacGpuUnhealthy", "node": str(node.pk), "hostname": "gpu-41",
        "cluster_name": "mac", "severity": "critical", "gpu": "3",
    }  # fmt: skip
    notes = alert["annotations"]
    assert notes["gpu"] == "GPU 3 (UUID GPU-3, serial 1650924060103)"
    assert notes["evidence"] == XID79.words()
    assert notes["action"] == "reboot" and "sudo reboot" in notes["fix"]
    assert (
        notes["summary"] == "GPU 3 (UUID GPU-3, serial 1650924060103) on gpu-41 is "
        "unhealthy: reboot the node"
    )
    assert notes["runbook_url"] == "docs/gpu-health.md#what-to-do"
    sent = node_alert_hook.wait_for(about("gpu-41", "MacGpuUnhealthy", "firing"), timeout=30)
    assert sent.body["alerts"][0]["annotations"]["evidence"] == XID79.words()


def test_degraded_warns_and_an_applications_xid_is_no_alert(alertmanager):
    node = online_gpu_node("gpu-42", "10.0.0.42")
    slow = Evidence("throttle", "0x40", "clocks held back: hardware thermal slowdown",
                    HealthState.DEGRADED, HealthAction.NONE, AT, "1")  # fmt: skip
    verdict(node, 1, slow)
    verdict(node, 2, xid(13, HealthState.HEALTHY, HealthAction.RESTART_APP,
                         "XID 13: graphics engine exception", gpu=2))  # fmt: skip

    nodealerts.post_node_alerts()

    [alert] = held(alertmanager, "gpu-42")
    assert (alert["labels"]["alertname"], alert["labels"]["severity"], alert["labels"]["gpu"]) == (
        "MacGpuDegraded", "warning", "1"
    )  # fmt: skip


def test_a_gpu_healthy_again_or_in_maintenance_ends_its_alert(alertmanager, node_alert_hook):
    node = online_gpu_node("gpu-43", "10.0.0.43")
    other = online_gpu_node("gpu-44", "10.0.0.44")
    row = verdict(node, 3, XID79)
    verdict(other, 3, XID79)
    nodealerts.post_node_alerts()
    assert node_alert_hook.wait_for(about("gpu-43", "MacGpuUnhealthy", "firing"), timeout=30)

    GpuHealth.objects.filter(pk=row.pk).update(state="healthy", action="none", evidence=[])
    Node.objects.filter(pk=other.pk).update(maintenance=True)
    post = nodealerts.post_node_alerts()

    assert post.gpus_resolved == sorted(
        [f"{node.pk}/3/MacGpuUnhealthy", f"{other.pk}/3/MacGpuUnhealthy"]
    )
    assert node_alert_hook.wait_for(about("gpu-43", "MacGpuUnhealthy", "resolved"), timeout=30)
    assert held(alertmanager, "gpu-43") == [] and held(alertmanager, "gpu-44") == []
    assert nodealerts.post_node_alerts().gpus_resolved == []


def test_worse_turns_the_warning_into_a_page(alertmanager):
    node = online_gpu_node("gpu-45", "10.0.0.45")
    slow = Evidence("row_remap", "pending", "a row remap is pending (a GPU reset applies it)",
                    HealthState.DEGRADED, HealthAction.RESET_GPU, AT, "3")  # fmt: skip
    row = verdict(node, 3, slow)
    nodealerts.post_node_alerts()
    GpuHealth.objects.filter(pk=row.pk).update(
        state="unhealthy", action="reboot", evidence=[XID79.as_dict(), slow.as_dict()]
    )
    post = nodealerts.post_node_alerts()
    assert post.gpus_firing == [f"{node.pk}/3/MacGpuUnhealthy"]
    assert post.gpus_resolved == [f"{node.pk}/3/MacGpuDegraded"]
    [alert] = held(alertmanager, "gpu-45")
    assert alert["labels"]["alertname"] == "MacGpuUnhealthy"
    assert alert["annotations"]["evidence"] == f"{XID79.words()}\n{slow.words()}"


def test_the_email_of_a_gpu_alert_says_the_gpu_the_evidence_and_the_fix(
    alertmanager, smtp, am_settings
):
    from alerting import services
    from alerting.models import NotificationChannel
    from testkit.alerting import body_text

    channel = NotificationChannel(
        name="ops mail", kind="email", email_to="ops@example.test", smtp_host="127.0.0.1",
        smtp_port=smtp.port, smtp_from="mac@example.test", smtp_require_tls=False,
        severities=["critical"],
    )  # fmt: skip
    services.save_channel(channel, actor="test")
    node = online_gpu_node("gpu-46", "10.0.0.46")
    verdict(node, 3, XID79)

    nodealerts.post_node_alerts()

    message = smtp.wait_for(lambda m: "MacGpuUnhealthy" in m["Subject"], timeout=30)
    assert message["Subject"] == "[MAC FIRING:1] MacGpuUnhealthy: gpu-46"
    text = body_text(message)
    assert "GPU:       GPU 3 (UUID GPU-3, serial 1650924060103)" in text
    assert f"Evidence:  {XID79.words()}" in text
    assert "Action:    reboot" in text
    assert "sudo reboot" in text


def test_a_verdict_this_release_cannot_read_pages_and_the_rest_still_posts(alertmanager):
    """A later release's state or action, or evidence it cannot parse (a downgrade, a row
    edited by hand), made the whole post fail: no node or GPU alert went out for anyone."""
    odd = online_gpu_node("gpu-47", "10.0.0.47")
    GpuHealth.objects.create(
        node=odd, index=2, uuid="GPU-2", state="quarantined", action="replace_board",
        evidence=[{"detail": "fenced by a later release", "state": "quarantined"}, "raw words"],
    )  # fmt: skip
    plain = online_gpu_node("gpu-48", "10.0.0.48")
    verdict(plain, 3, XID79)

    post = nodealerts.post_node_alerts()

    assert post.error == ""
    assert post.gpus_firing == sorted(
        [f"{odd.pk}/2/MacGpuUnhealthy", f"{plain.pk}/3/MacGpuUnhealthy"]
    )
    [alert] = held(alertmanager, "gpu-47")
    assert alert["labels"]["severity"] == "critical"
    notes = alert["annotations"]
    assert notes["summary"] == "GPU 2 (UUID GPU-2) on gpu-47 is unhealthy: replace_board"
    assert notes["action"] == "replace_board" and "fix" not in notes
    assert notes["evidence"] == "fenced by a later release\nraw words"
    assert [a["labels"]["gpu"] for a in held(alertmanager, "gpu-48")] == ["3"]


def test_an_alert_an_earlier_release_posted_under_another_name_is_still_ended():
    from alerting.gpualerts import resolved_alert

    alert = resolved_alert("7/3/MacGpuOld", "gpu-07", "2026-12-05T20:00:00Z", "http://mac")
    assert alert["labels"]["alertname"] == "MacGpuOld" and alert["endsAt"].startswith("2026")


def test_a_renamed_node_ends_its_alert_under_the_old_name_at_once(alertmanager):
    node = online_gpu_node("gpu-old")
    verdict(node, 3, XID79)
    nodealerts.post_node_alerts()
    assert [a["labels"]["alertname"] for a in held(alertmanager, "gpu-old")] == ["MacGpuUnhealthy"]
    Node.objects.filter(pk=node.pk).update(hostname="gpu-new")  # re-registered under a new name

    post = nodealerts.post_node_alerts()

    assert post.gpus_resolved == [f"{node.pk}/3/MacGpuUnhealthy"]
    assert held(alertmanager, "gpu-old") == []  # ended now, not in two minutes
    assert [a["labels"]["alertname"] for a in held(alertmanager, "gpu-new")] == ["MacGpuUnhealthy"]


def test_a_gpus_end_is_sent_again_for_an_alertmanager_behind_the_master(
    alertmanager, node_alert_hook, monkeypatch
):
    """alerting.nodealerts.RESEND_ENDS: an end Alertmanager took for a future one (its clock
    behind) is lost; the next post sends it again and it resolves."""
    import time
    from datetime import datetime, timedelta

    class Ahead(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(seconds=2)

    monkeypatch.setattr(nodealerts, "datetime", Ahead)
    node = online_gpu_node("gpu-48", "10.0.0.48")
    verdict(node, 3, XID79)
    assert nodealerts.post_node_alerts().gpus_firing == [f"{node.pk}/3/MacGpuUnhealthy"]
    GpuHealth.objects.filter(node=node).update(
        state=HealthState.HEALTHY, action=HealthAction.NONE, evidence=[]
    )
    assert nodealerts.post_node_alerts().gpus_resolved == [f"{node.pk}/3/MacGpuUnhealthy"]
    time.sleep(2.5)
    assert held(alertmanager, "gpu-48")  # the end lost

    again = nodealerts.post_node_alerts()

    deadline = time.monotonic() + 10
    while held(alertmanager, "gpu-48") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert held(alertmanager, "gpu-48") == []
    assert again.gpus_resent == [f"{node.pk}/3/MacGpuUnhealthy"] and again.gpus_resolved == []
    assert node_alert_hook.wait_for(about("gpu-48", "MacGpuUnhealthy", "resolved"), timeout=30)
    # Firing again: the end still due is dropped, never sent over the new alert.
    verdict_again = GpuHealth.objects.filter(node=node)
    verdict_again.update(state=HealthState.UNHEALTHY, action=HealthAction.REBOOT,
                         evidence=[XID79.as_dict()])  # fmt: skip
    post = nodealerts.post_node_alerts()
    assert post.gpus_resent == [] and post.gpus_firing == [f"{node.pk}/3/MacGpuUnhealthy"]
    assert cache.get(gpualerts.ENDED_KEY) == []
