"""The fleet page's alerts and table in real headless Chromium: grouped alerts keep the
node table in view, Offline rows stay one line, chart ticks read as numbers.

A master of its own (uvicorn behind nginx, test_browser's Server) pointed at a real
Alertmanager that holds the alerts.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from alerting import queries, services
from alerting.client import Alertmanager
from inventory.choices import Diagnosis, NodeStatus, StatusReason
from inventory.live import broadcast_alerts
from testkit.alerting import AlertmanagerServer, firing_alerts
from testkit.browser import log_in
from testkit.factories import bulk_nodes
from testkit.ports import free_port
from tests.macweb.dashboard.test_browser import (  # noqa: F401 (fixtures)
    Server,
    browser,
    in_thread,
    operator,
    page,
    server_env,
)
from tests.macweb.dashboard.test_browser import pytestmark as browser_marks

pytestmark = [
    *browser_marks,
    pytest.mark.skipif(
        not shutil.which("prometheus-alertmanager"), reason="Debian's Alertmanager is needed"
    ),
]


@pytest.fixture
def alerting_master(chart_env, tmp_path, settings) -> Iterator[tuple[Server, str]]:
    """A dashboard server whose Alertmanager is a real one of this test."""
    settings.ALERTMANAGER_DIR = tmp_path / "am"
    services.apply_channels(reload=False)
    manager = AlertmanagerServer(services.config_path(), tmp_path / "am-data").start()
    settings.ALERTMANAGER_URL = manager.url
    env = {**server_env(chart_env, tmp_path / "data"), "MAC_ALERTMANAGER_URL": manager.url}
    port = free_port()
    server = Server(f"http://127.0.0.1:{port}", port, env, tmp_path / "proxy")
    try:
        server.start()
        yield server, manager.url
    finally:
        try:
            server.stop()
        finally:
            manager.stop()


def post_alerts(nodes, alertname: str, severity: str) -> None:
    pairs = [(node.pk, node.hostname) for node in nodes]
    Alertmanager.from_settings().post_alerts(firing_alerts(pairs, alertname, severity))


def test_fifty_alerts_of_two_kinds_are_two_groups_above_a_table_in_view(
    page,  # noqa: F811 (test_browser's fixture)
    alerting_master,
    operator,  # noqa: F811 (test_browser's fixture)
    tmp_path,
):
    from playwright.sync_api import expect

    server, _ = alerting_master
    offline = in_thread(
        bulk_nodes, 30, status=NodeStatus.OFFLINE, status_reason=StatusReason.REFUSED,
        diagnosis=Diagnosis.SERVICE_DOWN,
    )  # fmt: skip
    scraped = in_thread(bulk_nodes, 20, start=100)
    post_alerts(offline, "MacNodeOffline", "critical")
    post_alerts(scraped, "MacExporterDown", "warning")

    log_in(page, server.url)
    panel = page.locator("#alerts-panel")
    expect(panel).to_have_attribute("data-state", "firing")
    expect(page.locator("#alerts-count")).to_have_text("50")
    groups = page.locator("#alerts-list > li.alert-group")
    expect(groups).to_have_count(2)
    expect(groups.nth(0)).to_contain_text("MacNodeOffline")
    expect(groups.nth(0)).to_contain_text("\u00d7 30")
    expect(groups.nth(0)).to_contain_text("and 27 more")
    expect(groups.nth(1)).to_contain_text("MacExporterDown")
    expect(groups.nth(1)).to_contain_text("\u00d7 20")
    # Without scrolling, the node table and its first rows are on the screen.
    expect(page.locator("#nodes thead")).to_be_in_viewport()
    expect(page.locator("#node-rows tr").nth(2)).to_be_in_viewport()
    page.screenshot(path=str(tmp_path / "fleet-50-alerts.png"))

    # A group opens on a click to its nodes, and its link filters the table to them.
    groups.nth(1).locator("summary").click()
    expect(groups.nth(1).locator(".group-nodes li")).to_have_count(20)
    # A push redraws the panel (one more node offline); the group opened stays open.
    post_alerts(in_thread(bulk_nodes, 1, start=200), "MacNodeOffline", "critical")
    snapshot = in_thread(queries.firing_alerts, Alertmanager.from_settings())
    in_thread(broadcast_alerts, snapshot.as_dict())
    expect(groups.nth(0)).to_contain_text("\u00d7 31")
    expect(groups.nth(1).locator(".group-nodes")).to_be_visible()
    expect(groups.nth(0).locator(".group-nodes")).to_be_hidden()
    groups.nth(1).locator("a.group-filter").click()
    page.wait_for_url("**/?alert=MacExporterDown")
    expect(page.locator("#node-rows tr")).to_have_count(20)
    expect(page.locator("#alert-filter")).to_contain_text("MacExporterDown")


def test_offline_rows_stay_one_line_with_the_diagnosis_a_click_away(
    page,  # noqa: F811 (test_browser's fixture)
    alerting_master,
    operator,  # noqa: F811 (test_browser's fixture)
    tmp_path,
):
    from playwright.sync_api import expect

    server, _ = alerting_master
    in_thread(bulk_nodes, 5)
    in_thread(
        bulk_nodes, 20, start=100, status=NodeStatus.OFFLINE, status_reason=StatusReason.TIMEOUT,
        status_detail="no answer within 3.0 s", diagnosis=Diagnosis.IP_FORWARD_OFF,
    )  # fmt: skip
    log_in(page, server.url)
    rows = page.locator("#node-rows tr")
    expect(rows).to_have_count(25)
    offline = rows.filter(has=page.locator(".badge-offline"))
    # Measured in the page in one call: live updates may redraw a row between two calls.
    online = rows.filter(has=page.locator(".badge-online")).first.evaluate(
        "row => row.getBoundingClientRect().height"
    )
    heights = offline.evaluate_all("rows => rows.map(r => r.getBoundingClientRect().height)")
    assert len(heights) == 20
    assert max(heights) <= online + 2, (heights, online)  # one line, as tall as an Online row
    page.screenshot(path=str(tmp_path / "fleet-20-offline.png"), full_page=True)

    first = offline.first
    expect(first.locator(".diagnosis-label")).to_have_text("· IPv4 forwarding is off on the agent")
    expect(first.locator(".diagnosis")).to_be_hidden()
    first.locator("details.why-more > summary").click()
    expect(first.locator(".diagnosis")).to_be_visible()
    first.locator("details.fix > summary").click()
    expect(first.locator("details.fix pre")).to_contain_text("sudo sysctl -w net.ipv4.ip_forward=1")


def test_chart_ticks_have_one_scale_and_the_decimals_their_spacing_needs(
    page,  # noqa: F811 (test_browser's fixture)
    alerting_master,
    operator,  # noqa: F811 (test_browser's fixture)
):
    server, _ = alerting_master
    log_in(page, server.url)
    labels = page.evaluate(
        """async () => {
          const units = await import("/static/dashboard/js/units.js");
          return {
            memory: units.tickLabels([101888, 102400, 102912], "MiB"),
            wide: units.tickLabels([0, 20480, 40960, 61440], "MiB"),
            small: units.tickLabels([0, 256, 512], "MiB"),
            rate: units.tickLabels([0, 2.5e9, 5e9], "B/s"),
            percent: units.tickLabels([0, 25, 50], "%"),
            legend: units.formatValue(102400, "MiB"),
          };
        }"""
    )
    assert labels["memory"] == ["99.5Gi", "100.0Gi", "100.5Gi"]  # not "100Gi" three times
    assert labels["wide"] == ["0Gi", "20Gi", "40Gi", "60Gi"]
    assert labels["small"] == ["0", "256", "512"]
    assert labels["rate"] == ["0.0G", "2.5G", "5.0G"]
    assert labels["percent"] == ["0", "25", "50"]
    assert labels["legend"] == "100 GiB"
