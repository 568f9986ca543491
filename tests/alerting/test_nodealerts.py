"""The master posts its own node alerts to a real Alertmanager (alerting.nodealerts)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from alerting import drainalert, gpualerts, nodealerts
from alerting.client import Alertmanager
from contract.diagnosis import DESCRIPTIONS
from healthcheck.health import run_health_checks
from inventory.choices import NodeStatus
from inventory.models import Node
from inventory.services.changes import set_maintenance
from testkit.factories import offline_node, online_gpu_node
from testkit.ports import free_port
from tests.alerting.conftest import needs_alertmanager

pytestmark = [pytest.mark.django_db, needs_alertmanager]

LABELS = set(nodealerts.LABEL_NAMES)


# What the master keeps of its posts, none of it left by another test.
KEYS = (
    nodealerts.POSTED_KEY,
    nodealerts.STATS_KEY,
    nodealerts.LOCK_KEY,
    nodealerts.ENDED_KEY,
    gpualerts.POSTED_KEY,
    gpualerts.ENDED_KEY,
    drainalert.POSTED_KEY,
    drainalert.ENDED_KEY,
)


@pytest.fixture(autouse=True)
def fresh_state():
    cache.delete_many(KEYS)
    yield
    cache.delete_many(KEYS)


def held(alertmanager, hostname: str) -> list[dict]:
    """Alertmanager's active alerts for this host."""
    return [
        a
        for a in alertmanager.get("/api/v2/alerts?active=true&silenced=true&inhibited=true")
        if a["labels"].get("hostname") == hostname
    ]


def about(host: str, status: str):
    def match(body: dict) -> bool:
        return any(
            a["labels"].get("hostname") == host and a["status"] == status for a in body["alerts"]
        )

    return match


def test_an_offline_node_is_posted_with_its_words_and_notifies_once(
    alertmanager, node_alert_hook, am_settings
):
    am_settings.PUBLIC_URL = "http://mac.example.test:28080"
    node = offline_node("gpu-11", "10.0.0.11")
    online_gpu_node("gpu-12", "10.0.0.12")

    post = nodealerts.post_node_alerts()

    assert post.error == "" and post.firing == [node.pk]
    [alert] = held(alertmanager, "gpu-11")
    assert set(alert["labels"]) == LABELS
    assert alert["labels"]["node"] == str(node.pk)
    assert alert["labels"]["down_since"] == nodealerts.down_since(node.status_changed_at)
    meaning, fix = DESCRIPTIONS["ip_forward_off"]
    notes = alert["annotations"]
    assert notes["source"] == "mac-master"
    assert notes["diagnosis"] == "IPv4 forwarding is off on the agent"
    assert notes["description"] == meaning and notes["fix"] == fix
    assert notes["reason"] == "sys-exporter timed out (no answer within 3.0 s)"
    assert notes["node_url"] == f"http://mac.example.test:28080/nodes/{node.pk}/"
    assert notes["runbook_url"].endswith("#a-node-is-offline-macnodeoffline")
    assert held(alertmanager, "gpu-12") == []

    firing = node_alert_hook.wait_for(about("gpu-11", "firing"), timeout=30)
    assert firing is not None
    [sent] = firing.body["alerts"]
    assert sent["annotations"]["fix"] == fix and sent["annotations"]["source"] == "mac-master"
    # Re-posted after every sweep: the same alert, no second notification.
    for _ in range(3):
        assert nodealerts.post_node_alerts().error == ""
    time.sleep(3)  # several group intervals (1 s here)
    assert len(node_alert_hook.matching(about("gpu-11", "firing"))) == 1


def test_a_node_back_online_ends_its_alert_at_once(alertmanager, node_alert_hook):
    node = offline_node("gpu-21", "10.0.0.21")
    nodealerts.post_node_alerts()
    assert node_alert_hook.wait_for(about("gpu-21", "firing"), timeout=30)

    Node.objects.filter(pk=node.pk).update(status=NodeStatus.ONLINE)
    post = nodealerts.post_node_alerts()

    assert post.resolved == [node.pk] and post.firing == []
    resolved = node_alert_hook.wait_for(about("gpu-21", "resolved"), timeout=30)
    assert resolved is not None
    assert held(alertmanager, "gpu-21") == []
    assert nodealerts.post_node_alerts().resolved == []  # ended once, then forgotten


def test_a_node_in_maintenance_gets_no_alert_and_loses_the_one_it_had(alertmanager):
    resting = offline_node("gpu-31", "10.0.0.31", maintenance=True)
    other = offline_node("gpu-32", "10.0.0.32")

    assert nodealerts.post_node_alerts().firing == [other.pk]
    assert held(alertmanager, "gpu-31") == []

    Node.objects.filter(pk=other.pk).update(maintenance=True)
    assert nodealerts.post_node_alerts().resolved == [other.pk]
    assert held(alertmanager, "gpu-32") == []
    assert resting.pk not in nodealerts.post_node_alerts().firing


def test_maintenance_ends_the_alert_and_its_silence_lets_the_end_reach_the_pager(
    alertmanager, node_alert_hook, am_settings
):
    from alerting import silences

    node = offline_node("gpu-43", "10.0.0.43")
    nodealerts.post_node_alerts()
    assert node_alert_hook.wait_for(about("gpu-43", "firing"), timeout=30)

    set_maintenance(node, True, actor="admin:tester")
    silences.reconcile()  # the silence first, as the maintenance task may well make it
    nodealerts.post_node_alerts()  # then the sweep's post, which ends the alert

    # Alertmanager drops a silenced alert's end: the pager would stay "firing".
    assert node_alert_hook.wait_for(about("gpu-43", "resolved"), timeout=30)


def test_a_master_that_stops_posting_lets_the_alert_end_by_its_ends_at(
    alertmanager, node_alert_hook, monkeypatch, am_settings
):
    am_settings.PROBE_INTERVAL = 0.5
    monkeypatch.setattr(nodealerts, "ENDS_AFTER_MIN", 4.0)  # 4 s from the post
    offline_node("gpu-41", "10.0.0.41")
    posted_at = time.time()
    nodealerts.post_node_alerts()
    assert node_alert_hook.wait_for(about("gpu-41", "firing"), timeout=30)

    # No post any more (the master is dead): Alertmanager ends the alert by itself.
    resolved = node_alert_hook.wait_for(about("gpu-41", "resolved"), timeout=30)

    assert resolved is not None
    assert resolved.received_at - posted_at >= 4.0
    assert held(alertmanager, "gpu-41") == []


def test_a_failed_post_is_counted_shown_in_health_and_retried(
    alertmanager, am_settings, monkeypatch
):
    from healthcheck import health

    # A master just started: its sweeps are not late, however long the session has run.
    monkeypatch.setattr(health, "PROCESS_STARTED", time.time())
    node = offline_node("gpu-51", "10.0.0.51")
    reachable = am_settings.ALERTMANAGER_URL
    am_settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"  # nobody listens

    post = nodealerts.post_node_alerts()

    assert post.error.startswith("cannot reach http://127.0.0.1:")
    health = run_health_checks()
    assert health["status"] == "degraded" and "node_alerts" in health["degraded"]
    assert "node alerts not posted for" in health["checks"]["node_alerts"]["detail"]
    metrics = Client().get("/metrics").content.decode()
    assert 'mac_alert_posts_total{outcome="failed"} 1.0' in metrics

    am_settings.ALERTMANAGER_URL = reachable
    assert nodealerts.post_node_alerts().error == ""  # the next sweep's post
    assert [a["labels"]["node"] for a in held(alertmanager, "gpu-51")] == [str(node.pk)]
    health = run_health_checks()
    assert health["checks"]["node_alerts"]["ok"] is True
    metrics = Client().get("/metrics").content.decode()
    assert 'mac_alert_posts_total{outcome="ok"} 1.0' in metrics


def test_flaps_shorter_than_the_node_group_wait_page_nobody(
    alertmanager, node_alert_hook, am_settings
):
    """Down and up three times within the node route's group_wait, then down for good:
    the short incidents are never sent, the last is paged once, and its end once."""
    am_settings.ALERT_NODE_GROUP_WAIT = "3s"
    from alerting import services

    services.apply_channels()  # reload with these timings
    node = offline_node("gpu-61", "10.0.0.61")
    for status in [NodeStatus.OFFLINE, NodeStatus.ONLINE] * 3 + [NodeStatus.OFFLINE]:
        # As a sweep writes it: every change of status is a new incident.
        Node.objects.filter(pk=node.pk).update(status=status, status_changed_at=timezone.now())
        assert nodealerts.post_node_alerts().error == ""
        time.sleep(1.2)  # one sweep
    last = nodealerts.down_since(Node.objects.get(pk=node.pk).status_changed_at)

    assert wait_until(lambda: pages(node_alert_hook, "gpu-61"), timeout=30)
    time.sleep(4)  # the short incidents' groups would have sent by now
    assert [since for page in pages(node_alert_hook, "gpu-61") for since in page] == [last]
    Node.objects.filter(pk=node.pk).update(status=NodeStatus.ONLINE)
    assert nodealerts.post_node_alerts().resolved == [node.pk]
    assert wait_until(lambda: node_alert_hook.matching(about("gpu-61", "resolved")), 30)
    assert len(node_alert_hook.matching(about("gpu-61", "resolved"))) == 1


def pages(hook, host: str) -> list[list[str]]:
    """The firing notifications about `host`, each as the down_since of what it fires."""
    return [
        [a["labels"]["down_since"] for a in n.body["alerts"] if a["status"] == "firing"]
        for n in hook.matching(about(host, "firing"))
        if n.body["status"] == "firing"
    ]


def test_each_incident_of_a_node_is_paged_on_its_own(alertmanager, node_alert_hook):
    """Down, back, down again: two incidents, two groups, each paged once with only its
    own alert (the first's end goes out in its own group)."""
    node = offline_node("gpu-62", "10.0.0.62")
    incidents = []
    for status in (NodeStatus.OFFLINE, NodeStatus.ONLINE, NodeStatus.OFFLINE):
        Node.objects.filter(pk=node.pk).update(status=status, status_changed_at=timezone.now())
        incidents.append(nodealerts.down_since(Node.objects.get(pk=node.pk).status_changed_at))
        assert nodealerts.post_node_alerts().error == ""
        time.sleep(1.2)  # one sweep: longer than the node group wait (0 s here)

    assert wait_until(lambda: len(pages(node_alert_hook, "gpu-62")) == 2, timeout=30)
    assert sorted(pages(node_alert_hook, "gpu-62")) == sorted([[incidents[0]], [incidents[2]]])
    assert wait_until(lambda: node_alert_hook.matching(about("gpu-62", "resolved")), 30)
    [ended] = node_alert_hook.matching(about("gpu-62", "resolved"))
    assert [a["labels"]["down_since"] for a in ended.body["alerts"]] == [incidents[0]]


def test_an_earlier_incidents_resend_cannot_end_the_next(alertmanager, node_alert_hook):
    """Prometheus re-sends the backstop's resolved alert every minute for 15 minutes, with
    the old startsAt and endsAt. Alertmanager replaces an alert of the same labels with
    such a resend (their times do not overlap), so a node that went Offline again in
    those minutes lost its new alert. down_since makes the incidents two alerts."""
    first_down = timezone.now() - timedelta(minutes=5)
    node = offline_node("gpu-71", "10.0.0.71", status_changed_at=first_down)
    earlier = nodealerts.labels(node.pk, "gpu-71", nodealerts.down_since(first_down))
    # The first incident: posted, then ended (the node came back).
    assert nodealerts.post_node_alerts().firing == [node.pk]
    Node.objects.filter(pk=node.pk).update(status=NodeStatus.ONLINE)
    assert nodealerts.post_node_alerts().resolved == [node.pk]
    # Offline again: the master posts the new incident.
    Node.objects.filter(pk=node.pk).update(
        status=NodeStatus.OFFLINE, status_changed_at=timezone.now()
    )
    post = nodealerts.post_node_alerts()
    assert post.firing == [node.pk] and post.resolved == []
    assert node_alert_hook.wait_for(about("gpu-71", "firing"), timeout=30)
    [now_held] = held(alertmanager, "gpu-71")
    assert now_held["labels"]["down_since"] != earlier["down_since"]

    # Prometheus's resend of the first incident's end, as rules/alerting.go sends it.
    resend = {
        "labels": earlier,
        "annotations": {"source": "prometheus-backstop"},
        "startsAt": _iso(first_down + timedelta(minutes=1)),
        "endsAt": _iso(first_down + timedelta(minutes=3)),
    }
    client = Alertmanager(nodealerts.settings.ALERTMANAGER_URL, 5)
    client.post_alerts([resend])
    time.sleep(3)  # several group intervals (1 s here)
    assert [a["labels"] for a in held(alertmanager, "gpu-71")] == [now_held["labels"]]
    assert len(node_alert_hook.matching(about("gpu-71", "resolved"))) == 1  # the first's
    # The resend lands in the first incident's group, which has nothing firing to send:
    # the new incident is paged once, not again with the old end beside it.
    assert sorted(pages(node_alert_hook, "gpu-71")) == sorted(
        [[earlier["down_since"]], [now_held["labels"]["down_since"]]]
    )

    # What it did to one identity for both incidents: the resend ends the new alert.
    client.post_alerts([{**resend, "labels": now_held["labels"]}])
    assert wait_until_gone(alertmanager, "gpu-71")


def test_maintenance_ending_on_a_node_still_down_is_a_new_incident(
    alertmanager, node_alert_hook, client
):
    """Maintenance ends a node's alert, and the backstop, which fired as well, re-sends
    that end for 15 minutes. A node still Offline when its maintenance ends is posted as
    a new incident (down_since: when maintenance ended), which those re-sends cannot
    end; the master's /metrics gives the backstop the same down_since."""
    down = timezone.now() - timedelta(minutes=5)
    node = offline_node("gpu-73", "10.0.0.73", status_changed_at=down)
    assert nodealerts.post_node_alerts().firing == [node.pk]
    [first] = held(alertmanager, "gpu-73")
    assert set_maintenance(node, True, actor="admin")
    assert nodealerts.post_node_alerts().resolved == [node.pk]
    assert wait_until_gone(alertmanager, "gpu-73")
    maintenance_on = Node.objects.get(pk=node.pk).maintenance_changed_at

    assert set_maintenance(Node.objects.get(pk=node.pk), False, actor="admin")
    post = nodealerts.post_node_alerts()

    assert post.firing == [node.pk]
    [second] = held(alertmanager, "gpu-73")
    ended = Node.objects.get(pk=node.pk).maintenance_changed_at
    assert ended > maintenance_on > down
    assert second["labels"]["down_since"] == nodealerts.down_since(down, ended)
    assert second["labels"]["down_since"] != first["labels"]["down_since"]
    assert second["startsAt"] == first["startsAt"]  # still down since then, for people
    # The backstop's end of the first alert, as Prometheus re-sends it.
    resend = {
        "labels": {**first["labels"]},
        "annotations": {"source": "prometheus-backstop"},
        "startsAt": _iso(down + timedelta(minutes=1)),
        "endsAt": _iso(maintenance_on),
    }
    Alertmanager(nodealerts.settings.ALERTMANAGER_URL, 5).post_alerts([resend])
    time.sleep(3)  # several group intervals (1 s here)
    assert [a["labels"] for a in held(alertmanager, "gpu-73")] == [second["labels"]]
    # mac_node_up names the same incident, so the backstop joins this alert.
    metrics = client.get("/metrics").content.decode()
    [line] = [x for x in metrics.splitlines() if x.startswith("mac_node_up{") and "gpu-73" in x]
    assert f'down_since="{second["labels"]["down_since"]}"' in line


def test_the_incident_starts_at_the_later_of_going_down_and_maintenance_changing():
    down = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC)
    later = down + timedelta(minutes=7, seconds=30)
    assert nodealerts.incident_start(down, None) == down
    assert nodealerts.incident_start(down, later) == later
    # Maintenance that changed before the node went down does not move its incident.
    assert nodealerts.incident_start(later, down) == later
    assert nodealerts.down_since(down, later) == "2026-12-05T10:07:30Z"


def test_a_new_incident_after_an_unposted_recovery_ends_the_old_alert_in_the_same_post():
    """Offline, back and Offline again between two posts (a post failed, or was skipped):
    the post fires the new incident and ends the one it posted before; a rename too."""
    before = datetime(2026, 12, 5, 10, 1, 0, 400000, tzinfo=UTC)
    row = {
        "id": 7, "hostname": "gpu-07", "status_reason": "refused", "status_detail": "",
        "diagnosis": "", "status_changed_at": before + timedelta(minutes=3),
        "maintenance_changed_at": None,
    }  # fmt: skip
    posted = nodealerts.read_posted({7: ["gpu-07", nodealerts.down_since(before)]})

    alerts, post = nodealerts.build([row], posted, before + timedelta(minutes=4))

    assert post.firing == [7] and post.resolved == [7]
    since = [(a["labels"]["down_since"], "startsAt" in a) for a in alerts]
    assert since == [("2026-12-05T10:04:00Z", True), ("2026-12-05T10:01:00Z", False)]
    # Posted again with the same incident: nothing to end.
    again = nodealerts.read_posted(nodealerts.posted_record([row]))
    assert nodealerts.build([row], again, before)[1].resolved == []
    # Renamed mid-incident (re-registered under a new name): the old name's alert ends.
    renamed = nodealerts.build([{**row, "hostname": "gpu-07b"}], again, before)[0]
    assert [(a["labels"]["hostname"], "startsAt" in a) for a in renamed] == [
        ("gpu-07b", True),
        ("gpu-07", False),
    ]


def wait_until(condition, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def wait_until_gone(alertmanager, hostname: str, timeout: float = 10) -> bool:
    return wait_until(lambda: not held(alertmanager, hostname), timeout)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_a_record_from_before_down_since_still_ends_its_alert(alertmanager):
    """An upgraded master's record holds the hostname alone: the alert it names was
    posted without down_since, and its end goes without it too."""
    node = online_gpu_node("gpu-91", "10.0.0.91")
    old_labels = nodealerts.labels(node.pk, "gpu-91", "")
    assert "down_since" not in old_labels
    Alertmanager(nodealerts.settings.ALERTMANAGER_URL, 5).post_alerts(
        [{"labels": old_labels, "endsAt": _iso(timezone.now() + timedelta(minutes=2))}]
    )
    assert [a["labels"] for a in held(alertmanager, "gpu-91")] == [old_labels]
    cache.set(nodealerts.POSTED_KEY, {node.pk: "gpu-91"}, None)

    assert nodealerts.post_node_alerts().resolved == [node.pk]
    assert wait_until_gone(alertmanager, "gpu-91")


def test_another_installations_records_are_never_posted(alertmanager, node_alert_hook):
    """A master that used this Redis before left its post record under its own prefix."""
    from django.conf import settings
    from django.core.cache.backends.redis import RedisCache

    other = RedisCache(settings.REDIS_URL, {"KEY_PREFIX": "mac-0123456789abcdef"})
    other.set(nodealerts.POSTED_KEY, {1: "gpu-of-another-master"}, 60)
    node = offline_node("gpu-81", "10.0.0.81")
    try:
        post = nodealerts.post_node_alerts()
    finally:
        other.delete(nodealerts.POSTED_KEY)

    assert post.resolved == [] and post.firing == [node.pk]
    assert node_alert_hook.wait_for(about("gpu-81", "firing"), timeout=30)
    assert not node_alert_hook.matching(about("gpu-of-another-master", "resolved"))


@pytest.fixture
def eager_celery():
    """Queued tasks run in the test, as a worker would run them."""
    from macweb.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def test_every_sweep_posts_the_offline_nodes(alertmanager, eager_celery, tmp_path):
    from healthcheck.state import SweepStats
    from healthcheck.sweep import load_nodes, publish

    node = offline_node("gpu-71", "10.0.0.71")
    publish(SweepStats(started_at=time.time()), load_nodes(), sd_dir=tmp_path)

    assert [a["labels"]["node"] for a in held(alertmanager, "gpu-71")] == [str(node.pk)]


def test_a_broker_that_refuses_the_post_is_counted_not_raised(am_settings, monkeypatch):
    from alerting.tasks import queue_node_alerts

    def refuse(**kw):
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr("alerting.tasks.post_node_alerts.apply_async", refuse)
    queue_node_alerts()
    stats = nodealerts.post_stats()
    assert stats["failed"] == 1 and "broker down" in stats["last_error"]


def test_a_post_with_nothing_to_send_clears_a_failure_to_queue(am_settings, monkeypatch):
    """The broker refused one post, then came back; the fleet has nothing to alert about:
    /health is ok again, and no post with nothing in it is counted as one."""
    from alerting.tasks import queue_node_alerts
    from healthcheck import health

    monkeypatch.setattr(health, "PROCESS_STARTED", time.time())

    def refuse(**kw):
        raise ConnectionRefusedError("broker down")

    with monkeypatch.context() as broken:
        broken.setattr("alerting.tasks.post_node_alerts.apply_async", refuse)
        queue_node_alerts()
    assert "node_alerts" in run_health_checks()["degraded"]

    post = nodealerts.post_node_alerts()  # what the worker runs once the broker is back

    assert (post.error, post.firing, post.resolved) == ("", [], [])
    stats = nodealerts.post_stats()
    assert (stats["last_error"], stats["failing_since"], stats["failed"]) == ("", 0, 1)
    assert stats["ok"] == 0  # nothing was posted
    checks = run_health_checks()
    assert "node_alerts" not in checks["degraded"]
    assert checks["checks"]["node_alerts"]["ok"] is True


def test_an_unknown_diagnosis_code_is_posted_in_its_own_words(alertmanager):
    """A row left by a newer release (rolled back) names a diagnosis this one does not
    know: its node still alerts, and so does every other."""
    odd = offline_node("gpu-95", "10.0.0.95")
    Node.objects.filter(pk=odd.pk).update(diagnosis="gpu_fan_dead")
    other = offline_node("gpu-96", "10.0.0.96")

    post = nodealerts.post_node_alerts()

    assert post.error == "" and post.firing == [odd.pk, other.pk]
    [alert] = held(alertmanager, "gpu-95")
    assert alert["annotations"]["diagnosis"] == "gpu_fan_dead"
    assert alert["annotations"]["description"] == "Unknown diagnosis 'gpu_fan_dead'."
    assert [a["labels"]["node"] for a in held(alertmanager, "gpu-96")] == [str(other.pk)]
    assert nodealerts.post_stats()["ok"] == 1


def test_a_post_that_cannot_be_built_is_a_failure_health_shows(am_settings, monkeypatch):
    from healthcheck import health

    monkeypatch.setattr(health, "PROCESS_STARTED", time.time())
    offline_node("gpu-97", "10.0.0.97")

    def broken(row, now):
        raise KeyError("a field this release does not know")

    monkeypatch.setattr(nodealerts, "firing_alert", broken)
    with pytest.raises(KeyError):
        nodealerts.post_node_alerts()

    assert "could not be built" in nodealerts.post_stats()["last_error"]
    assert "node_alerts" in run_health_checks()["degraded"]
    assert cache.get(nodealerts.LOCK_KEY) is None  # the next post is not locked out


SKEW = 2.0  # seconds the site's Alertmanager is behind the master


def master_clock_ahead(seconds: float) -> type[datetime]:
    """datetime, as the master's clock reads it: `seconds` ahead of Alertmanager's."""

    class Ahead(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(seconds=seconds)

    return Ahead


def test_an_end_that_alertmanager_took_for_a_future_one_is_sent_again(
    alertmanager, node_alert_hook, monkeypatch
):
    """An Alertmanager whose clock is behind takes the end's endsAt (the master's now) for
    a moment ahead, and keeps the firing post's later endsAt: the end is lost, the alert
    lasts minutes more. The master sends the same end again on the next posts, by when
    that moment has passed on Alertmanager's clock too, as Prometheus re-sends its own."""
    monkeypatch.setattr(nodealerts, "datetime", master_clock_ahead(SKEW))
    node = offline_node("gpu-98", "10.0.0.98")
    assert nodealerts.post_node_alerts().firing == [node.pk]
    assert node_alert_hook.wait_for(about("gpu-98", "firing"), timeout=30)
    Node.objects.filter(pk=node.pk).update(status=NodeStatus.ONLINE)
    assert nodealerts.post_node_alerts().resolved == [node.pk]
    time.sleep(SKEW + 0.5)
    assert held(alertmanager, "gpu-98") != []  # the end lost, as the reviewer saw it

    nodealerts.post_node_alerts()  # the next sweep's

    assert wait_until_gone(alertmanager, "gpu-98")
    assert node_alert_hook.wait_for(about("gpu-98", "resolved"), timeout=30)
    resent = [nodealerts.post_node_alerts().resent for _ in range(nodealerts.RESEND_ENDS)]
    assert resent == [[node.pk]] * (nodealerts.RESEND_ENDS - 1) + [[]]  # then forgotten
    time.sleep(3)  # several group intervals (1 s here): each end is notified once
    assert len(node_alert_hook.matching(about("gpu-98", "resolved"))) == 1


def test_an_end_is_not_sent_again_once_the_same_alert_fires_again():
    before = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC)
    row = {
        "id": 7, "hostname": "gpu-07", "status_reason": "refused", "status_detail": "",
        "diagnosis": "", "status_changed_at": before, "maintenance_changed_at": None,
    }  # fmt: skip
    since = nodealerts.down_since(before)
    ended = [[7, "gpu-07", since, "2026-12-05T10:05:00Z", 2], [8, "gpu-08", "", "x", 1]]

    alerts, kept = nodealerts.resend_ends(ended, nodealerts.posted_record([row]))

    # node 7's alert fires again under the same labels: its end is dropped, never sent
    assert kept == [[8, "gpu-08", "", "x", 1]]
    assert [(a["labels"]["node"], a["endsAt"]) for a in alerts] == [("8", "x")]


def test_the_drain_budgets_end_is_sent_again_too(alertmanager, monkeypatch):
    monkeypatch.setattr(drainalert, "datetime", master_clock_ahead(SKEW))
    spent = {"mode": "on", "budget": "10%", "fleet": 20, "limit": 2, "drained": 2,
             "held_back": ["gpu-01"]}  # fmt: skip
    client = Alertmanager(nodealerts.settings.ALERTMANAGER_URL, 5)

    def firing() -> list[dict]:
        return [
            a for a in alertmanager.get("/api/v2/alerts?active=true")
            if a["labels"]["alertname"] == drainalert.ALERTNAME
        ]  # fmt: skip

    assert drainalert.post_budget_alert(spent, client) == ""
    assert firing()
    assert drainalert.post_budget_alert({**spent, "held_back": []}, client) == ""
    time.sleep(SKEW + 0.5)
    assert firing()  # the end lost

    assert drainalert.post_budget_alert({**spent, "held_back": []}, client) == ""

    assert wait_until(lambda: not firing(), timeout=10)
