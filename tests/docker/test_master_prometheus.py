"""mac-prometheus on the real engine: it loads the configuration and rules MAC writes at
its start (manage.py prometheus_config, as under the process runtime), scrapes the
master with MAC_METRICS_TOKEN when it is set (in the master's env file, as `mac env set`
writes it), and without it when it is `off`."""

from __future__ import annotations

import pytest
import yaml

from scraping.promconfig import ALERT_RULES
from testkit.docker_engine import NS_IP
from testkit.waiting import http_status, wait_for
from tests.docker.conftest import METRICS_TOKEN

# netns too: the engine runs in a namespace of its own (runs with `-m netns` only).
pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
# Published on the master's loopback only (issue 22): asked from the node itself.
PROMETHEUS = "http://127.0.0.1:29090"


def _api(master, path: str) -> dict:
    answer = master.on_loopback(f"{PROMETHEUS}{path}")
    return (answer.get("data") or {}) if isinstance(answer, dict) else {}


def _master_target(master) -> dict:
    """The mac-master job's target once a scrape succeeded (the first one may come
    before the recreated api-server answers; the next is a scrape interval later)."""
    for target in _api(master, "/api/v1/targets").get("activeTargets", []):
        if target["labels"].get("job") == "mac-master" and target["health"] == "up":
            return target
    return {}


def test_prometheus_loads_macs_alert_rules(docker_master):
    shipped = {
        rule["alert"]
        for group in yaml.safe_load(ALERT_RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    groups = wait_for(
        lambda: _api(docker_master, "/api/v1/rules").get("groups"),
        what="the rules in /api/v1/rules",
        timeout=120,
        interval=1.0,
    )
    loaded = {rule["name"] for group in groups for rule in group["rules"]}
    assert shipped and shipped <= loaded, loaded
    # The rules of the image's own code (MAC_ALERT_FOR and MAC_RUNBOOK_BASE_URL unset).
    files = {group["file"] for group in groups}
    assert len(files) == 1 and files.pop().endswith("/scraping/prometheus/alerts.yml")


def test_prometheus_sends_the_metrics_token_and_scrapes_without_one_when_unset(docker_master):
    metrics = f"http://{NS_IP}:28080/metrics"
    assert http_status(metrics) == 401
    assert http_status(metrics, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}) == 200
    wait_for(
        lambda: _master_target(docker_master),
        timeout=60,
        what="Prometheus scraping the master with the token",
        interval=1.0,
    )

    # Off (the environment wins over the env file): mac-prometheus's configuration has no
    # token file any more, and /metrics is open.
    open_master = {**docker_master.env, "MAC_METRICS_TOKEN": "off"}
    restarted = docker_master.mac("restart", "master", env=open_master)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    wait_for(
        lambda: http_status(metrics) == 200, timeout=120, what="the open /metrics", interval=1.0
    )
    token = docker_master.engine.docker(
        "exec", "mac-prometheus", "cat", "/tmp/mac-prometheus/metrics_token"
    )
    assert token.returncode != 0 and "No such file" in token.stderr, token.stdout + token.stderr
    wait_for(
        lambda: _master_target(docker_master),
        timeout=60,
        what="Prometheus scraping the open master",
        interval=1.0,
    )

    # And back: the session's master keeps its token for the tests after this one.
    again = docker_master.mac("restart", "master")
    assert again.returncode == 0, again.stdout + again.stderr
    wait_for(
        lambda: http_status(metrics) == 401, timeout=120, what="/metrics closed again", interval=1.0
    )
    wait_for(
        lambda: _master_target(docker_master),
        timeout=60,
        what="Prometheus scraping with the token again",
        interval=1.0,
    )
