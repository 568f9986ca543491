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
from testkit.ports import free_port

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
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens there
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


def test_a_runbook_link_is_kept_only_for_http_and_https(client, user, manager):
    """An alert's annotations are anyone's who can post to Alertmanager: a `javascript:`
    runbook_url must not become a script link on the master's own origin."""
    nodes = [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]
    alerts = firing_alerts(nodes, "SiteAlert", "info")
    runbooks = [
        "javascript:alert(document.cookie)",
        " JaVa\tScript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "http://[runbooks.example/SiteAlert",  # urlsplit refuses it
        "https://runbooks.example/SiteAlert",
    ]
    for alert, runbook in zip(alerts, runbooks, strict=True):
        alert["annotations"]["runbook_url"] = runbook
    manager.post_alerts(alerts)
    client.force_login(user)

    page = client.get("/alerts/")

    assert page.status_code == 200
    text = page.content.decode()
    assert text.count(">runbook</a>") == 1
    assert '<a href="https://runbooks.example/SiteAlert">runbook</a>' in text
    assert "javascript:" not in text.lower() and "data:text" not in text
    rows = client.get("/alerts.json").json()["alerts"]
    assert sorted(row["runbook_url"] for row in rows) == ["", "", "", "", runbooks[-1]]


def test_another_cluster_s_silences_are_not_listed(client, user, make_node, manager):
    """A shared Alertmanager holds other MAC masters' silences too (theirs name their
    cluster_name): neither the page nor the node's panel lists them."""
    node = make_node("gpu-42", "10.1.0.42")
    now = datetime.now(UTC)
    theirs = _silence("mac", str(node.pk), now - timedelta(minutes=1))
    theirs["matchers"].append({"name": "cluster_name", "value": "another", "isRegex": False})
    theirs["comment"] = "their maintenance"
    ours = _silence("mac", str(node.pk), now - timedelta(minutes=1))
    ours["matchers"].append({"name": "cluster_name", "value": "mac", "isRegex": False})
    not_theirs = _silence("oncall", str(node.pk), now - timedelta(minutes=1))
    not_theirs["matchers"].append(
        {"name": "cluster_name", "value": "another", "isRegex": False, "isEqual": False}
    )
    for silence in (theirs, ours, not_theirs):
        manager.create_silence(silence)
    client.force_login(user)

    page = client.get("/alerts/").content.decode()
    panel = client.get(f"/nodes/{node.pk}/alerts.json").json()

    assert "their maintenance" not in page and 'id="silences-total">2<' in page
    assert "silence by mac" in page and "silence by oncall" in page
    assert sorted(s["comment"] for s in panel["silences"]) == [
        "silence by mac", "silence by oncall",
    ]  # fmt: skip


def test_a_node_label_of_other_digits_names_no_node(client, user, make_node, manager):
    """ "²".isdigit() and "٣".isdigit() hold, and int("٣") is 3: only ASCII digits (and no
    more than an id has) name one of our nodes."""
    node = make_node("gpu-43", "10.1.0.43")
    arabic = str(node.pk).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    alerts = firing_alerts([(1, "sup")], "SiteAlert", "info")
    alerts[0]["labels"]["node"] = "²"
    alerts += firing_alerts([(1, "arabic")], "MacNodeOffline", "critical")
    alerts[-1]["labels"]["node"] = arabic
    alerts += firing_alerts([(1, "long")], "MacExporterDown", "warning")
    alerts[-1]["labels"]["node"] = "9" * 5000  # int() refuses past 4,300 digits
    manager.post_alerts(alerts)
    client.force_login(user)

    page = client.get("/alerts/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "SiteAlert" in text and "MacNodeOffline" in text and "MacExporterDown" in text
    assert 'href="/nodes/' not in text
    for name in ("SiteAlert", "MacNodeOffline", "MacExporterDown"):
        answer = client.get(f"/fleet.json?alert={name}")
        assert answer.status_code == 200 and answer.json()["nodes"] == [], name
