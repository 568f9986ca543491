"""Maintenance means silence: MAC's silences in a real Alertmanager follow the inventory."""

from __future__ import annotations

import datetime as dt

import pytest

from alerting import silences
from alerting.client import Alertmanager
from inventory import services as inventory
from tests.alerting.conftest import needs_alertmanager

pytestmark = [pytest.mark.django_db, needs_alertmanager]


@pytest.fixture
def eager_celery():
    """The signal's task runs in the test, as a worker would run it."""
    from macweb.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def live(alertmanager) -> list[dict]:
    return [s for s in alertmanager.get("/api/v2/silences") if s["status"]["state"] == "active"]


def test_maintenance_on_creates_a_silence_for_the_node_and_off_expires_it(
    alertmanager, make_node, eager_celery, django_capture_on_commit_callbacks
):
    node = make_node("gpu-07", "10.1.0.7")

    with django_capture_on_commit_callbacks(execute=True):
        inventory.set_maintenance(node, True, actor="admin:tester")

    [silence] = live(alertmanager)
    assert silence["createdBy"] == "mac"
    assert f"node {node.pk}" in silence["comment"] and "gpu-07" in silence["comment"]
    matchers = {m["name"]: (m["value"], m["isEqual"]) for m in silence["matchers"]}
    assert matchers == {
        "node": (str(node.pk), True), "cluster_name": ("mac", True),
        # the master's own alerts are not silenced: it ends them, and the end must go out
        "alertname": ("MacGpuDegraded|MacGpuUnhealthy|MacNodeOffline", False),
    }  # fmt: skip

    with django_capture_on_commit_callbacks(execute=True):
        inventory.set_maintenance(node, False, actor="admin:tester")

    assert live(alertmanager) == []


def test_silences_that_people_made_are_never_touched(alertmanager, make_node):
    node = make_node("gpu-08", "10.1.0.8")
    now = dt.datetime.now(dt.UTC)
    theirs = Alertmanager.from_settings().create_silence(
        {
            "matchers": silences.matchers(node.pk),
            "startsAt": now.isoformat(),
            "endsAt": (now + dt.timedelta(hours=2)).isoformat(),
            "createdBy": "oncall@example.test",
            "comment": "switch work",
        }
    )

    done = silences.reconcile()  # the node is not in maintenance

    assert done.expired == []
    assert [s["id"] for s in live(alertmanager)] == [theirs]


def test_a_node_that_leaves_the_inventory_loses_its_silence(
    alertmanager, make_node, eager_celery, django_capture_on_commit_callbacks
):
    node = make_node("gpu-09", "10.1.0.9", maintenance=True)
    silences.reconcile()
    assert len(live(alertmanager)) == 1

    with django_capture_on_commit_callbacks(execute=True):
        inventory.remove_node(node, actor="admin:tester", message="gone")

    assert live(alertmanager) == []


def test_silences_lost_by_a_killed_alertmanager_come_back(alertmanager, make_node):
    first = make_node("gpu-10", "10.1.0.10", maintenance=True)
    second = make_node("gpu-11", "10.1.0.11", maintenance=True)
    assert sorted(silences.reconcile().created) == [first.pk, second.pk]

    alertmanager.kill()  # SIGKILL: no snapshot, the silences are gone
    alertmanager.start()
    assert live(alertmanager) == []

    done = silences.reconcile()

    assert sorted(done.created) == [first.pk, second.pk]
    assert len(live(alertmanager)) == 2
    assert silences.reconcile().created == []  # nothing made twice


def test_a_silence_an_earlier_release_made_is_replaced_with_todays_matchers(
    alertmanager, make_node
):
    node = make_node("gpu-09", "10.1.0.9", maintenance=True)
    client = Alertmanager.from_settings()
    old = silences.new_silence(node.pk, node.hostname)
    old["matchers"] = old["matchers"][:2]  # node and cluster_name only, as before
    client.create_silence(old)

    done = silences.reconcile()

    assert done.created == [node.pk]
    [silence] = live(alertmanager)
    assert {m["name"] for m in silence["matchers"]} == {"node", "cluster_name", "alertname"}


@pytest.mark.django_db(transaction=True)  # two reconciles in two threads, as two workers
def test_maintenance_off_then_on_at_once_keeps_the_silence(alertmanager, make_node):
    """OFF's reconcile decides to expire the silence; before it does, ON's reads the
    silence as lasting and makes none. One reconcile at a time: ON then reads after
    OFF's expiry and makes a new one."""
    import threading

    from django.db import connection

    from inventory.models import Node

    node = make_node("gpu-12", "10.1.0.12", maintenance=True)
    silences.reconcile()
    [first] = live(alertmanager)
    decided, go = threading.Event(), threading.Event()

    class PausedBeforeExpiring(Alertmanager):
        def expire_silence(self, silence_id):
            decided.set()
            go.wait(10)
            return super().expire_silence(silence_id)

    def reconcile(client: Alertmanager) -> None:
        try:
            silences.reconcile([node.pk], client=client)
        finally:
            connection.close()

    Node.objects.filter(pk=node.pk).update(maintenance=False)  # OFF, and its task
    off = threading.Thread(target=reconcile, args=(PausedBeforeExpiring.from_settings(),))
    off.start()
    assert decided.wait(10)
    Node.objects.filter(pk=node.pk).update(maintenance=True)  # ON at once, and its task
    on = threading.Thread(target=reconcile, args=(Alertmanager.from_settings(),))
    on.start()
    on.join(2)  # with nothing to wait for, ON is done well within this
    go.set()
    off.join(20)
    on.join(20)

    [silence] = live(alertmanager)
    assert silence["id"] != first["id"]
    assert silences.node_of(silence) == node.pk


def test_a_reconcile_that_waits_too_long_says_so_and_the_poll_does_not_wait(
    alertmanager, make_node, monkeypatch
):
    from alerting import tasks

    node = make_node("gpu-13", "10.1.0.13", maintenance=True)
    monkeypatch.setattr(silences, "LOCK_WAIT", 0.3)
    with silences.one_at_a_time(0):  # another worker's reconcile, still running
        assert tasks.sync_silences([node.pk]) == {
            "ok": False,
            "error": "another reconcile of the silences held them for over 0.3 s",
        }
        assert "silences_created" not in tasks.sync_alertmanager()
        assert live(alertmanager) == []
    assert tasks.sync_alertmanager()["silences_created"] == [node.pk]


def test_a_redis_that_does_not_answer_leaves_reconcile_unlocked(alertmanager, make_node, settings):
    from testkit.ports import free_port

    node = make_node("gpu-14", "10.1.0.14", maintenance=True)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens

    assert silences.reconcile().created == [node.pk]
    assert len(live(alertmanager)) == 1


@pytest.mark.parametrize("label", ["\u00b2", "\u0663", "9" * 5000, "7a"])
def test_a_node_label_of_other_digits_is_no_node_of_ours(label, settings):
    """'²'.isdigit() holds and int() refuses it: a reconcile over such a silence raised."""
    silence = {
        "createdBy": silences.CREATED_BY,
        "status": {"state": "active"},
        "matchers": [
            {"name": "cluster_name", "value": settings.CLUSTER_NAME, "isRegex": False},
            {"name": "node", "value": label, "isRegex": False},
        ],
    }
    assert silences.node_of(silence) is None
    silence["matchers"][1]["value"] = "42"
    assert silences.node_of(silence) == 42
