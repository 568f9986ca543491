"""Which services `mac start master` runs with MAC_SCRAPE_SHARDS, and what they agree on."""

from __future__ import annotations

import stat

import pytest

from maccli.master import master_specs
from maccli.output import CliError
from node.config import NodeConfig


def _config(tmp_path, **values: str) -> NodeConfig:
    environ = {
        "MAC_NODE_ENV_FILE": str(tmp_path / "node.env"),
        "MAC_USER_ENV_FILE": str(tmp_path / "user.env"),
        "MAC_DATA_DIR": str(tmp_path / "data"),
        "PATH": "/usr/bin:/bin",
        **values,
    }
    return NodeConfig.load(environ=environ)


def test_it_runs_one_prometheus_when_sharding_is_off(tmp_path):
    specs = {spec.name: spec for spec in master_specs(_config(tmp_path))}
    assert specs["prometheus"].argv[0] == "/usr/bin/prometheus"
    assert not {"store", "rules", "scraper-0"} & set(specs)
    assert "MAC_SCRAPER_URLS" not in specs["api-server"].env


def test_it_runs_scrapers_a_store_and_rules_instead_of_prometheus(tmp_path):
    cfg = _config(tmp_path, MAC_SCRAPE_SHARDS="3", MAC_METRICS_STORE_PORT="39428")
    specs = {spec.name: spec for spec in master_specs(cfg)}
    assert {"store", "scraper-0", "scraper-1", "scraper-2", "rules", "prometheus"} <= set(specs)
    assert specs["store"].argv[0] == "/usr/bin/victoria-metrics"
    assert "-retentionPeriod=15d" in specs["store"].argv
    assert [specs[f"scraper-{k}"].port for k in range(3)] == [29430, 29431, 29432]
    for k in range(3):
        assert "-remoteWrite.url=http://127.0.0.1:39428/api/v1/write" in specs[f"scraper-{k}"].argv
    assert "-datasource.url=http://127.0.0.1:39428" in specs["rules"].argv
    # 29090 stays the guide's port: the merged targets view.
    assert specs["prometheus"].argv[1:3] == ["-m", "healthcheck.targetsview"]
    assert specs["prometheus"].port == 29090
    env = specs["api-server"].env
    assert env["MAC_PROMETHEUS_URL"] == "http://127.0.0.1:39428"  # charts read the store
    assert env["MAC_TARGETS_URL"] == "http://127.0.0.1:29090"  # the merged targets view
    assert env["MAC_SCRAPER_URLS"].split(",") == [f"http://127.0.0.1:{29430 + k}" for k in range(3)]
    assert all(spec.env is env for spec in specs.values())  # every process agrees


def test_it_makes_the_sd_token_once_and_keeps_it_private(tmp_path):
    first = master_specs(_config(tmp_path, MAC_SCRAPE_SHARDS="2"))[0].env["MAC_SD_TOKEN"]
    again = master_specs(_config(tmp_path, MAC_SCRAPE_SHARDS="2"))[0].env["MAC_SD_TOKEN"]
    assert first == again and len(first) >= 32
    token_file = tmp_path / "data" / "scaleout" / "sd_token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    given = master_specs(_config(tmp_path, MAC_SCRAPE_SHARDS="2", MAC_SD_TOKEN="site-token"))
    assert given[0].env["MAC_SD_TOKEN"] == "site-token"


def test_a_site_store_replaces_macs_own(tmp_path):
    cfg = _config(tmp_path, MAC_SCRAPE_SHARDS="1", MAC_METRICS_STORE_URL="http://vm.site:8428/")
    specs = {spec.name: spec for spec in master_specs(cfg)}
    assert "store" not in specs
    assert "-remoteWrite.url=http://vm.site:8428/api/v1/write" in specs["scraper-0"].argv
    assert specs["api-server"].env["MAC_PROMETHEUS_URL"] == "http://vm.site:8428"


@pytest.mark.parametrize("value", ["-1", "65"])
def test_it_refuses_a_shard_count_out_of_range(tmp_path, value):
    with pytest.raises(CliError, match="MAC_SCRAPE_SHARDS"):
        master_specs(_config(tmp_path, MAC_SCRAPE_SHARDS=value))


def test_it_says_scale_out_needs_the_process_runtime(tmp_path):
    with pytest.raises(CliError, match="process runtime"):
        master_specs(_config(tmp_path, MAC_SCRAPE_SHARDS="2"), docker=True)
