"""The Prometheus configuration: promtool-valid, a job per targets file, docker copy in step."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from healthcheck.promconfig import (
    ALERT_RULES,
    DOCKER_METRICS_TOKEN,
    DOCKER_RULES,
    docker_prometheus_yaml,
    render_prometheus_yaml,
)
from healthcheck.targets import SCRAPED_SERVICES

REPO = Path(__file__).resolve().parents[2]
DOCKER_FILE = REPO / "docker" / "prometheus" / "prometheus.yml"


def test_one_job_per_targets_file_and_one_for_the_master(tmp_path):
    config = yaml.safe_load(render_prometheus_yaml(str(tmp_path), ["10.9.9.9:28080"]))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"mac-master", *SCRAPED_SERVICES}
    assert jobs["mac-master"]["static_configs"] == [{"targets": ["10.9.9.9:28080"]}]
    assert jobs["dcgm-exporter"]["file_sd_configs"][0]["files"] == [
        str(tmp_path / "dcgm-exporter.json")
    ]


def test_the_docker_file_is_the_rendered_config():
    expected = docker_prometheus_yaml("docker/prometheus/prometheus.yml")
    config = yaml.safe_load(expected)
    # The same rules as the process runtime's, and the token file the api-server writes.
    assert config["rule_files"] == [DOCKER_RULES]
    assert config["scrape_configs"][0]["authorization"] == {
        "type": "Bearer",
        "credentials_file": DOCKER_METRICS_TOKEN,
    }
    assert DOCKER_FILE.read_text() == expected, (
        "docker/prometheus/prometheus.yml is stale: run "
        ".venv/bin/python manage.py prometheus_config --docker "
        "--out docker/prometheus/prometheus.yml"
    )


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian's prometheus) missing")
@pytest.mark.parametrize("interval", ["15s", "2s"])
def test_the_command_writes_a_config_promtool_accepts(tmp_path, interval):
    out = tmp_path / "prometheus.yml"
    sd_dir = tmp_path / "targets"
    call_command(
        "prometheus_config", "--out", str(out), "--sd-dir", str(sd_dir),
        "--scrape-interval", interval,
    )  # fmt: skip
    assert sorted(p.name for p in sd_dir.iterdir()) == sorted(f"{s}.json" for s in SCRAPED_SERVICES)
    check = subprocess.run(
        ["promtool", "check", "config", str(out)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "WARNING" not in check.stdout + check.stderr


def test_a_bad_master_address_is_named(tmp_path):
    with pytest.raises(CommandError, match="--master 'nohost' is not HOST:PORT"):
        call_command("prometheus_config", "--out", str(tmp_path / "p.yml"), "--master", "nohost")


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian's prometheus) missing")
def test_promtool_accepts_the_docker_file_with_its_rules_where_the_image_puts_them(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "alerts.yml").write_text(ALERT_RULES.read_text())
    (tmp_path / "metrics_token").write_text("")
    text = DOCKER_FILE.read_text().replace(DOCKER_RULES, str(rules / "alerts.yml"))
    text = text.replace(DOCKER_METRICS_TOKEN, str(tmp_path / "metrics_token"))
    (tmp_path / "prometheus.yml").write_text(text)
    check = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 1 rule files found" in check.stdout + check.stderr


def test_the_metrics_token_file_holds_the_token_or_nothing(tmp_path, settings):
    token_file = tmp_path / "auth" / "metrics_token"
    settings.METRICS_TOKEN = "s3cret-metrics"
    call_command("prometheus_config", "--metrics-token-file", str(token_file))
    assert token_file.read_text() == "s3cret-metrics"
    assert token_file.stat().st_mode & 0o777 == 0o600
    settings.METRICS_TOKEN = ""
    call_command("prometheus_config", "--metrics-token-file", str(token_file))
    assert token_file.read_text() == ""


def test_out_is_required_without_a_token_file(tmp_path):
    with pytest.raises(CommandError, match="--out FILE is required"):
        call_command("prometheus_config")
