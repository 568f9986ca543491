"""/metrics behind MAC_METRICS_TOKEN: open by default, a bearer token when set, and MAC's
own Prometheus configuration sends it (issue 11, security defect 7)."""

from __future__ import annotations

import shutil
import stat
import subprocess
import time

import pytest
import yaml
from django.core.management import call_command

from testkit.ports import free_port
from testkit.waiting import wait_for

pytestmark = pytest.mark.django_db
TOKEN = "metrics-token-for-tests-0123456789"
PROMETHEUS = shutil.which("prometheus")


def test_it_is_open_to_anyone_by_default(client, settings, make_node):
    settings.METRICS_TOKEN = ""
    make_node(hostname="gpu-01", ip="10.1.0.1", status="online")

    response = client.get("/metrics")

    assert response.status_code == 200
    assert b'mac_node_up{cluster_name="mac",down_since="",gpu_vendor="none",' in response.content


@pytest.mark.parametrize(
    "header", [None, "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer "]
)
def test_it_refuses_callers_without_the_token_when_set(client, settings, make_node, header):
    settings.METRICS_TOKEN = TOKEN
    make_node(hostname="gpu-01", ip="10.1.0.1")
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}

    response = client.get("/metrics", **extra)

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"MAC_METRICS_TOKEN" in response.content
    assert b"gpu-01" not in response.content


def test_it_answers_the_token_holder(client, settings, make_node):
    settings.METRICS_TOKEN = TOKEN
    make_node(hostname="gpu-01", ip="10.1.0.1")

    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")

    assert response.status_code == 200
    assert b'hostname="gpu-01"' in response.content


def _write_config(tmp_path, master: str, interval: str = "15s"):
    out = tmp_path / "prometheus" / "prometheus.yml"
    call_command(
        "prometheus_config", "--out", str(out), "--sd-dir", str(tmp_path / "targets"),
        "--master", master, "--scrape-interval", interval,
    )  # fmt: skip
    return out


def test_the_generated_config_sends_the_token_from_a_private_file(tmp_path, settings):
    settings.METRICS_TOKEN = TOKEN

    out = _write_config(tmp_path, "127.0.0.1:28080")

    job = yaml.safe_load(out.read_text())["scrape_configs"][0]
    assert job["job_name"] == "mac-master"
    token_file = out.parent / "metrics_token"
    assert job["authorization"] == {"type": "Bearer", "credentials_file": str(token_file)}
    assert token_file.read_text() == TOKEN
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600


def test_without_a_token_the_config_sends_none_and_drops_an_old_file(tmp_path, settings):
    settings.METRICS_TOKEN = TOKEN
    _write_config(tmp_path, "127.0.0.1:28080")
    settings.METRICS_TOKEN = ""

    out = _write_config(tmp_path, "127.0.0.1:28080")

    assert "authorization" not in yaml.safe_load(out.read_text())["scrape_configs"][0]
    assert not (out.parent / "metrics_token").exists()


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian's prometheus) missing")
def test_promtool_accepts_the_config_with_the_token(tmp_path, settings):
    settings.METRICS_TOKEN = TOKEN
    out = _write_config(tmp_path, "127.0.0.1:28080")

    check = subprocess.run(
        ["promtool", "check", "config", str(out)], capture_output=True, text=True, check=False
    )

    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.skipif(not PROMETHEUS, reason="Debian's prometheus is not installed")
@pytest.mark.django_db(transaction=True)
def test_a_real_prometheus_scrapes_the_protected_metrics(
    tmp_path, settings, live_server, processes
):
    import json
    import urllib.request

    settings.METRICS_TOKEN = TOKEN
    out = _write_config(tmp_path, live_server.url.removeprefix("http://"), interval="1s")
    port = free_port()
    processes.start(
        "prometheus",
        [
            PROMETHEUS, f"--config.file={out}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        env=None,
    )  # fmt: skip

    def master_health() -> str | None:
        try:
            url = f"http://127.0.0.1:{port}/api/v1/targets?state=active"
            with urllib.request.urlopen(url, timeout=2) as response:
                targets = json.loads(response.read())["data"]["activeTargets"]
        except (OSError, ValueError, KeyError):
            return None
        for target in targets:
            if target["labels"]["job"] == "mac-master" and target["health"] != "unknown":
                return target["health"]
        return None

    started = time.monotonic()
    assert wait_for(master_health, timeout=60, interval=0.3) == "up", time.monotonic() - started
