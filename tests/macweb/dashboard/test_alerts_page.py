"""The dashboard's Alerts page (/alerts/): Alertmanager's alerts and silences for people,
where /alertmanager/ opened in a browser lands (Debian's Alertmanager has no web UI).
Against a real Alertmanager holding alerts and silences."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta

import pytest

from alerting import bulkheads
from alerting.client import Alertmanager
from testkit.alerting import AlertmanagerServer, firing_alerts

pytestmark = pytest.mark.django_db

CONFIG = "route: {receiver: nobody}\nreceivers: [{name: nobody}]\n"


@pytest.fixture
def manager(tmp_path, settings):
    if not shutil.which("prometheus-alertmanager"):
        pytest.skip("Debian's prometheus-alertmanager is needed")
    (tmp_path / "am.yml").write_text(CONFIG)
    server = AlertmanagerServer(tmp_path / "am.yml", tmp_path / "am-data").start()
    settings.ALERTMANAGER_URL = server.url
    yield Alertmanager(server.url, timeout=5)
    server.stop()


def _silence(created_by: str, node: str, starts: datetime) -> dict:
    return {
        "matchers": [{"name": "node", "value": node, "isRegex": False, "isEqual": True}],
        "startsAt": starts.isoformat(),
        "endsAt": (starts + timedelta(hours=2)).isoformat(),
        "createdBy": created_by,
        "comment": f"silence by {created_by}",
    }


def test_it_needs_a_login(client):
    answer = client.get("/alerts/")
    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")


def test_it_lists_this_clusters_alerts_and_the_silences(client, user, make_node, manager):
    node = make_node("gpu-41", "10.1.0.41")
    alerts = firing_alerts([(node.pk, "gpu-41")], "MacNodeOffline", "critical")
    alerts += firing_alerts([(999, "elsewhere")], "MacOtherCluster", "warning", "another")
    # An alert of another system: its node label is not one of ours.
    alerts += firing_alerts([(1, "x")], "SiteAlert", "info")
    alerts[-1]["labels"]["node"] = "rack-7"
    manager.post_alerts(alerts)
    now = datetime.now(UTC)
    manager.create_silence(_silence("mac", str(node.pk), now - timedelta(minutes=1)))
    manager.create_silence(_silence("oncall", "rack-7", now + timedelta(hours=1)))
    client.force_login(user)

    page = client.get("/alerts/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "MacNodeOffline" in text and f'href="/nodes/{node.pk}/"' in text
    assert "MacOtherCluster" not in text  # another cluster's, on a shared Alertmanager
    assert "SiteAlert" in text and 'href="/nodes/rack-7/"' not in text
    assert "silenced" in text  # MAC's maintenance silence holds MacNodeOffline
    assert "silence by mac" in text and "(maintenance)" in text
    assert "silence by oncall" in text and "pending" in text
    assert 'id="silences-total">2<' in text


def test_alertmanager_down_is_said(client, user, settings):
    settings.ALERTMANAGER_URL = "http://127.0.0.1:9"
    client.force_login(user)
    page = client.get("/alerts/")
    assert page.status_code == 503
    assert "Alerts unavailable: cannot reach" in page.content.decode()


def test_past_the_bulkhead_it_says_why(client, user, settings):
    settings.BULKHEAD_ALERTMANAGER = 1
    client.force_login(user)
    bulkheads.ALERTMANAGER.reset()
    try:
        with bulkheads.ALERTMANAGER.slot():
            page = client.get("/alerts/")
    finally:
        bulkheads.ALERTMANAGER.reset()
    assert page.status_code == 503
    assert "MAC_BULKHEAD_ALERTMANAGER=1" in page.content.decode()


def test_the_header_links_what_is_where(client, user, settings):
    client.force_login(user)
    page = client.get("/").content.decode()
    assert 'href="/alerts/"' in page and 'href="/prometheus/targets"' in page
    assert "/alertmanager/api/v2/" in client.get("/alerts/").content.decode()
    settings.ALERTMANAGER_MANAGED = False  # a site's own: its API is not served here
    assert "/alertmanager/api/v2/" not in client.get("/alerts/").content.decode()
