"""mac-alertmanager on the real engine: configured by the api-server from the channel that
`mac env set MAC_ALERT_WEBHOOK_URL=...` made, with a setting Compose passes through
(MAC_ALERT_GROUP_WAIT), fed by mac-prometheus, and a firing alert reaching the webhook."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from testkit.docker_engine import NS_IP
from testkit.waiting import wait_for

# netns too: the engine runs in a namespace of its own (runs with `-m netns` only).
pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
# Published on the master's loopback only (issue 22): asked from the node itself.
ALERTMANAGER = "http://127.0.0.1:29093"


def _json(master, url: str, body: object | None = None) -> object:
    data = ("-H", "Content-Type: application/json", "--data", json.dumps(body)) if body else ()
    return master.on_loopback(url, *data)


def _config(master) -> dict:
    status = _json(master, f"{ALERTMANAGER}/api/v2/status") or {}
    original = (status.get("config") or {}).get("original")
    return yaml.safe_load(original) if original else {}


def test_alertmanager_runs_the_channels_config_and_prometheus_sends_to_it(
    docker_master, master_webhook
):
    config = wait_for(
        lambda: _config(docker_master),
        timeout=120,
        what="mac-alertmanager's /api/v2/status",
        interval=1.0,
    )
    assert config["route"]["group_wait"] == "1s"  # MAC_ALERT_GROUP_WAIT from the env file
    webhooks = [
        hook["url"]
        for receiver in config["receivers"]
        for hook in receiver.get("webhook_configs", [])
    ]
    assert webhooks == [master_webhook.url]

    def prometheus_sends() -> list:
        answer = _json(docker_master, "http://127.0.0.1:29090/api/v1/alertmanagers") or {}
        data = answer.get("data") or {}
        return data.get("activeAlertmanagers")

    [target] = wait_for(
        prometheus_sends, timeout=60, what="mac-prometheus's Alertmanager", interval=1.0
    )
    assert target["url"].endswith(":29093/api/v2/alerts"), target

    health = _json(docker_master, f"http://{NS_IP}:28080/health") or {}
    checks = health.get("checks", {})
    assert checks["alertmanager"]["ok"], health
    assert "1 channel(s) in use" in checks["alert_channels"]["detail"], health


def test_a_firing_alert_reaches_the_webhook_channel(docker_master, master_webhook):
    wait_for(
        lambda: _config(docker_master),
        timeout=120,
        what="mac-alertmanager's /api/v2/status",
        interval=1.0,
    )
    marker = uuid.uuid4().hex
    alert = {
        "labels": {
            "alertname": "MacDockerAlertTest",
            "severity": "critical",
            "cluster_name": "mac",
            "hostname": f"gpu-{marker[:8]}",
        },
        "annotations": {"summary": f"test {marker}"},
    }
    _json(docker_master, f"{ALERTMANAGER}/api/v2/alerts", [alert])
    got = master_webhook.wait_for(
        lambda body: any(
            a["annotations"].get("summary") == f"test {marker}" for a in body.get("alerts", [])
        ),
        timeout=60,
    )
    assert got is not None, f"nothing reached {master_webhook.url}"
    assert got.body["status"] == "firing"
    assert got.body["commonLabels"]["alertname"] == "MacDockerAlertTest"
