"""`prometheus_config --ca-file`: the master's own scrape and the http_sd discovery go over
the proxy's HTTPS, verified against the master's CA (docs/tls.md); promtool accepts it."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from django.core.management import CommandError, call_command

from macweb.tls import prepare


@pytest.fixture
def ca_file(tmp_path):
    return str(prepare(tmp_path / "tls", []).ca)


def test_the_master_is_scraped_over_https_against_its_ca(tmp_path, ca_file):
    out = tmp_path / "prometheus.yml"
    call_command(
        "prometheus_config", "--out", str(out), "--sd-dir", str(tmp_path / "targets"),
        "--master", "127.0.0.1:28443", "--ca-file", ca_file,
    )  # fmt: skip

    master = yaml.safe_load(out.read_text())["scrape_configs"][0]
    assert master["job_name"] == "mac-master"
    assert master["scheme"] == "https"
    assert master["tls_config"] == {"ca_file": ca_file}
    assert master["static_configs"] == [{"targets": ["127.0.0.1:28443"]}]
    assert f"--ca-file {ca_file}" in out.read_text().splitlines()[2]  # how to regenerate it
    if shutil.which("promtool"):
        check = subprocess.run(
            ["promtool", "check", "config", str(out)], capture_output=True, text=True, check=False
        )
        assert check.returncode == 0, check.stdout + check.stderr


def test_http_sd_is_read_over_https_against_the_ca(tmp_path, ca_file, settings):
    settings.SD_TOKEN = "sd-token-for-tests"
    out = tmp_path / "prometheus.yml"
    call_command(
        "prometheus_config", "--out", str(out), "--master", "10.0.0.5:28443",
        "--shard", "1", "--of", "2", "--ca-file", ca_file,
    )  # fmt: skip

    jobs = yaml.safe_load(out.read_text())["scrape_configs"]
    sd = jobs[0]["http_sd_configs"][0]
    assert sd["url"].startswith("https://10.0.0.5:28443/api/v1/sd/")
    assert sd["tls_config"] == {"ca_file": ca_file}


def test_a_missing_ca_file_is_named(tmp_path):
    with pytest.raises(CommandError, match=r"--ca-file /nope/ca.pem: no such file"):
        call_command(
            "prometheus_config", "--out", str(tmp_path / "p.yml"), "--ca-file", "/nope/ca.pem"
        )
