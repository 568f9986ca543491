"""Which services `mac start master` runs with MAC_SCRAPE_SHARDS, and what they agree on."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from maccli import scaleout
from maccli.master import master_specs
from maccli.output import CliError
from maccli.runtimes.docker import DockerRuntime
from node.commands import CommandResult
from node.config import NodeConfig

REPO = Path(__file__).resolve().parents[2]


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


def _docker_engines(cfg: NodeConfig) -> tuple[dict, dict]:
    specs = master_specs(cfg, docker=True)
    engines = [s for s in specs if scaleout.is_engine(s.name) or s.name == "prometheus"]
    layout = scaleout.docker_layout(cfg)
    overrides = scaleout.env_overrides(cfg, layout)
    return {s.name: s for s in specs}, scaleout.compose_overlay(engines, overrides)


def test_under_docker_the_engines_reach_each_other_by_service_name(tmp_path):
    specs, overlay = _docker_engines(_config(tmp_path, MAC_SCRAPE_SHARDS="2"))
    assert "-httpListenAddr=0.0.0.0:29428" in specs["store"].argv
    assert "-storageDataPath=/var/lib/mac-metrics" in specs["store"].argv
    for k in range(2):
        assert "-remoteWrite.url=http://store:29428/api/v1/write" in specs[f"scraper-{k}"].argv
        assert specs[f"scraper-{k}"].prestart[0][:3] == ["python", "-m", "django"]
        assert "api-server:28080" in specs[f"scraper-{k}"].prestart[0]
    assert "-notifier.url=http://mac-alertmanager:29093" in specs["rules"].argv
    assert "--scraper" in specs["prometheus"].argv
    assert "http://scraper-1:29431" in specs["prometheus"].argv
    # Probed from the host, on the ports published on its loopback.
    assert specs["scraper-1"].liveness_url == "http://127.0.0.1:29431/health"

    services = overlay["services"]
    assert set(services) == {
        "store", "scraper-0", "scraper-1", "rules", "prometheus", "api-server", "worker", "beat"
    }  # fmt: skip
    scraper = services["scraper-1"]
    assert scraper["container_name"] == "mac-scraper-1"
    assert scraper["restart"] == "unless-stopped"  # Docker brings a dead scraper back
    assert scraper["ports"] == ["127.0.0.1:29431:29431"]
    script = scraper["command"][2]
    assert "scaleout_config --scraper 1 --of 2" in script and "exec /usr/bin/vmagent" in script
    assert "mac-metrics:/var/lib/mac-metrics" in services["store"]["volumes"]
    assert services["prometheus"]["command"][1:3] == ["-m", "healthcheck.targetsview"]
    master_env = services["api-server"]["environment"]
    assert master_env["MAC_PROMETHEUS_URL"] == "http://store:29428"
    assert master_env["MAC_SCRAPER_URLS"] == "http://scraper-0:29430,http://scraper-1:29431"
    assert master_env["MAC_TARGETS_URL"] == "http://prometheus:29090"
    # The http_sd token is passed through from mac's environment, never written down.
    assert "MAC_SD_TOKEN" not in master_env
    assert scraper["environment"]["MAC_SD_TOKEN"] is None


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose 1.29 is needed")
def test_compose_reads_the_overlay_over_the_master_file(tmp_path):
    _, overlay = _docker_engines(_config(tmp_path, MAC_SCRAPE_SHARDS="2"))
    path = scaleout.write_overlay(tmp_path / "data", overlay)
    done = subprocess.run(
        ["docker-compose", "-p", "mac", "-f", str(REPO / "docker" / "docker-compose.master.yml"),
         "-f", str(path), "config"],
        capture_output=True, text=True, check=False, timeout=60,
        env={"PATH": os.environ["PATH"], "MAC_SD_TOKEN": "passed-through"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    merged = yaml.safe_load(done.stdout)["services"]
    assert merged["prometheus"]["entrypoint"] in ([], None)
    assert merged["prometheus"]["command"][:3] == ["python", "-m", "healthcheck.targetsview"]
    assert merged["api-server"]["environment"]["MAC_PROMETHEUS_URL"] == "http://store:29428"
    assert merged["api-server"]["environment"]["MAC_SD_TOKEN"] == "passed-through"
    assert merged["scraper-0"]["environment"]["MAC_SD_TOKEN"] == "passed-through"
    assert set(merged["store"]["networks"]) == {"master"}


def test_prune_removes_only_the_unwanted_services_containers():
    calls: list[list[str]] = []

    def run(argv, **_):
        calls.append(list(argv))
        listing = "mac-store store\nmac-scraper-2 scraper-2\nmac-api-server api-server\n"
        return CommandResult(0, listing if argv[:2] == ["docker", "ps"] else "", "")

    runtime = DockerRuntime(run=run)
    wanted = {"store", "scraper-0", "scraper-1"}
    removed = runtime.prune(lambda s: scaleout.is_engine(s) and s not in wanted)
    assert removed == ["mac-scraper-2"]
    assert calls[-1] == ["docker", "rm", "-f", "mac-scraper-2"]
