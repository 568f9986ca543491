"""The Prometheus configuration: promtool-valid, a job per targets file, the token beside it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from scraping.promconfig import (
    RulesError,
    parse_rule_for,
    render_prometheus_yaml,
    shipped_rule_names,
)
from scraping.targets import SCRAPED_SERVICES

REPO = Path(__file__).resolve().parents[2]


def test_one_job_per_targets_file_and_one_for_the_master(tmp_path):
    config = yaml.safe_load(render_prometheus_yaml(str(tmp_path), ["10.9.9.9:28080"]))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"mac-master", *SCRAPED_SERVICES}
    assert jobs["mac-master"]["static_configs"] == [{"targets": ["10.9.9.9:28080"]}]
    assert jobs["dcgm-exporter"]["file_sd_configs"][0]["files"] == [
        str(tmp_path / "dcgm-exporter.json")
    ]


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


def test_the_metrics_token_goes_beside_the_config_or_nowhere(tmp_path, settings):
    """Prometheus sends MAC_METRICS_TOKEN from a 0600 file beside its config; unset, the
    file goes and the master's job has no bearer (both runtimes run this command)."""
    out = tmp_path / "prometheus.yml"
    settings.METRICS_TOKEN = "s3cret-metrics"
    call_command("prometheus_config", "--out", str(out), "--sd-dir", str(tmp_path / "t"))
    token_file = tmp_path / "metrics_token"
    assert token_file.read_text() == "s3cret-metrics"
    assert token_file.stat().st_mode & 0o777 == 0o600
    job = yaml.safe_load(out.read_text())["scrape_configs"][0]
    assert job["authorization"]["credentials_file"] == str(token_file)
    settings.METRICS_TOKEN = ""
    call_command("prometheus_config", "--out", str(out), "--sd-dir", str(tmp_path / "t"))
    assert not token_file.exists()
    assert "authorization" not in yaml.safe_load(out.read_text())["scrape_configs"][0]


def test_out_is_required(tmp_path):
    with pytest.raises(CommandError, match="--out FILE is required"):
        call_command("prometheus_config")


@pytest.mark.parametrize("interval", ["30s5m", "1m1m", "0s", "15"])
def test_a_scrape_interval_prometheus_would_refuse_is_named(tmp_path, interval):
    out = tmp_path / "prometheus.yml"
    with pytest.raises(CommandError, match=f"--scrape-interval '{interval}' is not a duration"):
        call_command("prometheus_config", "--out", str(out), "--scrape-interval", interval)
    assert not out.exists()


@pytest.mark.parametrize("duration", ["1m1m", "30s5m"])
def test_a_rule_duration_prometheus_would_refuse_is_named(duration):
    with pytest.raises(RulesError, match="each unit once, largest first"):
        parse_rule_for(f"MacNodeOffline={duration}", shipped_rule_names())
    assert parse_rule_for("MacNodeOffline=1m30s,GpuXidError=0s", shipped_rule_names()) == {
        "MacNodeOffline": "1m30s",
        "GpuXidError": "0s",
    }
