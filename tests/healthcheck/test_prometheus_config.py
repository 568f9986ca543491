"""The Prometheus configuration: promtool-valid, a job per targets file, docker copy in step."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from healthcheck.promconfig import DOCKER_MASTER, DOCKER_SD_DIR, render_prometheus_yaml
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
    expected = render_prometheus_yaml(
        DOCKER_SD_DIR, [DOCKER_MASTER], out="docker/prometheus/prometheus.yml", docker=True
    )
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
