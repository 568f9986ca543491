"""Which services `mac start master` runs with MAC_SCRAPE_SHARDS, and what they agree on."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from maccli.master import scaleout
from maccli.master.layout import docker_layout
from maccli.master.specs import master_specs
from maccli.output import CliError
from maccli.runtimes.docker import DockerRuntime
from node.config import ConfigError, NodeConfig
from node.runner import CommandResult

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
    assert specs["prometheus"].argv[1:3] == ["-m", "scraping.targetsview"]
    assert specs["prometheus"].port == 29090
    env = specs["api-server"].env
    assert env["MAC_PROMETHEUS_URL"] == "http://127.0.0.1:39428"  # charts read the store
    assert env["MAC_TARGETS_URL"] == "http://127.0.0.1:29090"  # the merged targets view
    assert env["MAC_RULES_URL"] == "http://127.0.0.1:29480"  # vmalert, which /health watches
    assert env["MAC_SCRAPER_URLS"].split(",") == [f"http://127.0.0.1:{29430 + k}" for k in range(3)]
    # Every process agrees; the engines collect garbage at Go's default, the store alone
    # holds its keys besides, vmalert its evaluation delay.
    engines = ("store", "rules", "scraper-0", "scraper-1", "scraper-2")
    assert all(spec.env is env for name, spec in specs.items() if name not in engines)
    for name in engines:
        assert {k: v for k, v in specs[name].env.items() if k in env} == env, name
        assert specs[name].env["GOGC"] == scaleout.ENGINE_GOGC == "100", name
    assert set(specs["rules"].env) - set(env) == {"GOGC", "MAC_VM_rule_evalDelay"}


def test_the_engines_listen_on_loopback_only(tmp_path):
    # The store's ingestion and the scrapers' pages have no key: nothing off this host
    # reaches them, under the process runtime (Docker publishes them on 127.0.0.1 only).
    cfg = _config(tmp_path, MAC_SCRAPE_SHARDS="2")
    specs = {spec.name: spec for spec in master_specs(cfg)}
    for name in ("store", "scraper-0", "scraper-1", "rules"):
        listen = [arg for arg in specs[name].argv if arg.startswith("-httpListenAddr=")]
        assert listen == [f"-httpListenAddr=127.0.0.1:{specs[name].port}"], name
        assert specs[name].bind == "127.0.0.1", name
    view = specs["prometheus"].argv
    assert view[view.index("--listen") + 1] == "127.0.0.1:29090"
    _, overlay = _docker_engines(cfg)
    for name in ("store", "scraper-0", "scraper-1", "rules"):
        assert overlay["services"][name]["ports"] == [
            f"127.0.0.1:{specs[name].port}:{specs[name].port}"
        ], name


def test_the_store_gets_its_keys_from_its_environment_never_its_command_line(tmp_path):
    cfg = _config(tmp_path, MAC_SCRAPE_SHARDS="1")
    store = {spec.name: spec for spec in master_specs(cfg)}["store"]
    again = {spec.name: spec for spec in master_specs(cfg)}["store"]
    assert "-envflag.enable" in store.argv and "-envflag.prefix=MAC_VM_" in store.argv
    keys = {k: v for k, v in store.env.items() if k.startswith("MAC_VM_")}
    assert set(keys) == {
        "MAC_VM_deleteAuthKey", "MAC_VM_snapshotAuthKey", "MAC_VM_forceMergeAuthKey",
        "MAC_VM_forceFlushAuthKey", "MAC_VM_search_resetCacheAuthKey", "MAC_VM_configAuthKey",
        "MAC_VM_flagsAuthKey", "MAC_VM_pprofAuthKey",
    }  # fmt: skip
    assert {k: again.env[k] for k in keys} == keys  # made once, kept across restarts
    assert not any(key in " ".join(store.argv) for key in keys.values())
    folder = tmp_path / "data" / "scaleout" / "store-keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for flag in scaleout.STORE_KEY_FLAGS:
        kept = folder / flag
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert kept.read_text() == keys[scaleout.envflag_variable(flag)]
    # Nothing else holds them.
    others = [spec for spec in master_specs(cfg) if spec.name != "store"]
    assert not any(k in spec.env for spec in others for k in keys)


def test_vmalert_gets_the_stores_latency_from_its_environment(tmp_path):
    """vmalert 1.94 and later (Debian 13's 1.112) evaluate as of -rule.evalDelay ago, 30 s
    by default; Debian 12's 1.79 has no such flag and would refuse it on its command line."""
    specs = {spec.name: spec for spec in master_specs(_config(tmp_path, MAC_SCRAPE_SHARDS="1"))}
    rules = specs["rules"]
    assert f"-search.latencyOffset={scaleout.STORE_LATENCY}" in specs["store"].argv
    assert "-envflag.enable" in rules.argv and "-envflag.prefix=MAC_VM_" in rules.argv
    assert rules.env["MAC_VM_rule_evalDelay"] == scaleout.STORE_LATENCY
    assert not any("evalDelay" in arg for arg in rules.argv)
    _, overlay = _docker_engines(_config(tmp_path / "docker", MAC_SCRAPE_SHARDS="1"))
    service = overlay["services"]["rules"]
    assert service["environment"]["MAC_VM_rule_evalDelay"] == scaleout.STORE_LATENCY
    assert "-envflag.enable" in service["command"][2]


@pytest.mark.skipif(not shutil.which("vmalert"), reason="Debian's vmalert is not installed")
def test_debian_12s_vmalert_runs_with_the_variable_it_does_not_know(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n")
    checked = subprocess.run(
        ["vmalert", f"-rule={rules}", "-dryRun", *scaleout.ENVFLAG_ARGS],
        env={**os.environ, **scaleout.RULES_ENVIRONMENT},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_scrapers_read_their_shares_of_the_sweeps_targets_files(tmp_path):
    cfg = _config(tmp_path, MAC_SCRAPE_SHARDS="2", MAC_PROBE_INTERVAL="20")
    specs = {spec.name: spec for spec in master_specs(cfg)}
    for k in range(2):
        argv = specs[f"scraper-{k}"].argv
        # as often as the sweep rewrites them, not vmagent's default 5 minutes
        assert "-promscrape.fileSDCheckInterval=20s" in argv
        assert not any(arg.startswith("-promscrape.httpSD") for arg in argv)
    # No process needs an http_sd token of its own any more: none is made.
    assert not any("MAC_SD_TOKEN" in spec.env for spec in specs.values())
    assert not (tmp_path / "data" / "scaleout" / "sd_token").exists()
    # The worker writes the shares: it knows how many scrapers there are.
    assert specs["worker"].env["MAC_SCRAPE_SHARDS"] == "2"
    # The token an earlier release made is still taken: scrapers elsewhere may send it.
    (tmp_path / "data" / "scaleout").mkdir(parents=True, exist_ok=True)
    (tmp_path / "data" / "scaleout" / "sd_token").write_text("made-by-an-earlier-release\n")
    specs = {spec.name: spec for spec in master_specs(cfg)}
    assert specs["api-server"].env["MAC_SD_TOKEN"] == "made-by-an-earlier-release"


def test_each_scraper_buffers_on_a_bounded_disk_while_the_store_is_away(tmp_path):
    specs = {spec.name: spec for spec in master_specs(_config(tmp_path, MAC_SCRAPE_SHARDS="2"))}
    for k in range(2):
        argv = specs[f"scraper-{k}"].argv
        buffer = tmp_path / "data" / "scaleout" / f"scraper-{k}-buffer"
        assert f"-remoteWrite.tmpDataPath={buffer}" in argv
        assert "-remoteWrite.maxDiskUsagePerURL=2GiB" in argv
    sized = master_specs(
        _config(tmp_path, MAC_SCRAPE_SHARDS="1", MAC_SCRAPER_BUFFER_BYTES="600MiB")
    )
    [scraper] = [spec for spec in sized if spec.name == "scraper-0"]
    assert "-remoteWrite.maxDiskUsagePerURL=600MiB" in scraper.argv
    with pytest.raises(CliError, match="MAC_SCRAPER_BUFFER_BYTES=lots is not a size"):
        master_specs(_config(tmp_path, MAC_SCRAPE_SHARDS="1", MAC_SCRAPER_BUFFER_BYTES="lots"))


def test_a_site_store_replaces_macs_own(tmp_path):
    cfg = _config(tmp_path, MAC_SCRAPE_SHARDS="1", MAC_METRICS_STORE_URL="http://vm.site:8428/")
    specs = {spec.name: spec for spec in master_specs(cfg)}
    assert "store" not in specs
    assert "-remoteWrite.url=http://vm.site:8428/api/v1/write" in specs["scraper-0"].argv
    assert specs["api-server"].env["MAC_PROMETHEUS_URL"] == "http://vm.site:8428"


@pytest.mark.parametrize("value", ["-1", "65"])
def test_it_refuses_a_shard_count_out_of_range(tmp_path, value):
    with pytest.raises(ConfigError, match=f"MAC_SCRAPE_SHARDS='{value}' is out of range"):
        master_specs(_config(tmp_path, MAC_SCRAPE_SHARDS=value))


def _docker_engines(cfg: NodeConfig) -> tuple[dict, dict]:
    layout = docker_layout(cfg)
    specs = master_specs(cfg, layout)
    engines = [s for s in specs if scaleout.is_engine(s.name) or s.name == "prometheus"]
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
    # Rules and alerts come from vmalert, as Prometheus answers them.
    assert "http://rules:29480" in specs["prometheus"].argv
    # Probed from the host, on the ports published on its loopback.
    assert specs["scraper-1"].liveness_url == "http://127.0.0.1:29431/health"

    services = overlay["services"]
    assert set(services) == {
        "store", "scraper-0", "scraper-1", "rules", "prometheus", "api-server", "worker", "beat",
        "proxy",
    }  # fmt: skip
    assert services["proxy"]["environment"]["MAC_SCRAPE_SHARDS"] == "2"  # its own pages
    scraper = services["scraper-1"]
    assert scraper["container_name"] == "mac-scraper-1"
    assert scraper["restart"] == "unless-stopped"  # Docker brings a dead scraper back
    assert scraper["ports"] == ["127.0.0.1:29431:29431"]
    script = scraper["command"][2]
    assert "scaleout_config --scraper 1 --of 2" in script and "exec /usr/bin/vmagent" in script
    assert "mac-metrics:/var/lib/mac-metrics" in services["store"]["volumes"]
    assert services["prometheus"]["command"][1:3] == ["-m", "scraping.targetsview"]
    master_env = services["api-server"]["environment"]
    assert master_env["MAC_PROMETHEUS_URL"] == "http://store:29428"
    assert master_env["MAC_SCRAPER_URLS"] == "http://scraper-0:29430,http://scraper-1:29431"
    assert master_env["MAC_TARGETS_URL"] == "http://prometheus:29090"
    assert master_env["MAC_RULES_URL"] == "http://rules:29480"
    # Each scraper reads its share of the sweep's targets files on the targets volume.
    assert "MAC_SD_TOKEN" not in master_env and "MAC_SD_TOKEN" not in scraper["environment"]
    assert scraper["environment"]["MAC_SD_DIR"] == "/var/lib/mac-targets"
    assert "mac-targets:/var/lib/mac-targets" in scraper["volumes"]
    assert "mac-targets:/var/lib/mac-targets" not in services["store"]["volumes"]
    assert scraper["environment"]["GOGC"] == services["store"]["environment"]["GOGC"] == "100"
    # So are the store's keys, to the store alone.
    store = services["store"]
    assert "-envflag.enable" in store["command"][2]
    assert '[ -n "$$MAC_VM_deleteAuthKey" ]' in store["command"][2]  # none: it stops
    for flag in scaleout.STORE_KEY_FLAGS:
        assert store["environment"][scaleout.envflag_variable(flag)] is None
        assert scaleout.envflag_variable(flag) not in scraper["environment"]


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose 1.29 is needed")
def test_compose_reads_the_overlay_over_the_master_file(tmp_path):
    _, overlay = _docker_engines(_config(tmp_path, MAC_SCRAPE_SHARDS="2"))
    path = scaleout.write_overlay(tmp_path / "data", overlay)
    done = subprocess.run(
        ["docker-compose", "-p", "mac", "-f", str(REPO / "docker" / "docker-compose.master.yml"),
         "-f", str(path), "config"],
        capture_output=True, text=True, check=False, timeout=60,
        env={"PATH": os.environ["PATH"], "MAC_VM_deleteAuthKey": "delete-key-passed-through"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "passed-through" not in path.read_text()  # secrets stay out of the file
    merged = yaml.safe_load(done.stdout)["services"]
    assert merged["prometheus"]["entrypoint"] in ([], None)
    assert merged["prometheus"]["command"][:3] == ["python", "-m", "scraping.targetsview"]
    assert merged["api-server"]["environment"]["MAC_PROMETHEUS_URL"] == "http://store:29428"
    assert merged["scraper-0"]["environment"]["MAC_SD_DIR"] == "/var/lib/mac-targets"
    assert merged["store"]["environment"]["MAC_VM_deleteAuthKey"] == "delete-key-passed-through"
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


def test_a_store_container_without_its_keys_stops_and_says_why():
    """`docker compose up` by hand, without mac's environment: empty keys would leave
    the store's endpoints open, so its container stops first."""
    script = scaleout._keys_given() + " && echo starting"
    base = {"PATH": os.environ["PATH"]}
    bare = subprocess.run(["sh", "-c", script], env=base, capture_output=True, text=True)
    assert bare.returncode == 1 and "mac start master" in bare.stderr and not bare.stdout
    keys = {scaleout.envflag_variable(flag): "k" for flag in scaleout.STORE_KEY_FLAGS}
    given = subprocess.run(
        ["sh", "-c", script], env={**base, **keys}, capture_output=True, text=True
    )
    assert given.returncode == 0 and given.stdout == "starting\n"


def test_under_docker_an_engine_runs_the_hosts_own_program_from_a_mount(tmp_path):
    program = tmp_path / "vm-1.112" / "vmalert"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    cfg = _config(tmp_path, MAC_SCRAPE_SHARDS="1", MAC_VMALERT_BIN=str(program))
    specs, _ = _docker_engines(cfg)
    assert specs["rules"].argv[0] == str(program)
    assert specs["store"].argv[0] == "/usr/bin/victoria-metrics"  # the image's own
    assert scaleout.host_programs(cfg) == [str(program)]
    engines = [s for s in specs.values() if scaleout.is_engine(s.name)]
    overlay = scaleout.compose_overlay(engines, {}, scaleout.host_programs(cfg))
    assert f"{program}:{program}:ro" in overlay["services"]["rules"]["volumes"]
    assert not any(str(program) in v for v in overlay["services"]["store"]["volumes"])


@pytest.mark.parametrize("given", ["relative/vmagent", "/nonexistent/vmagent", "folder"])
def test_a_program_that_is_not_an_executable_file_here_is_refused(tmp_path, given):
    if given == "folder":
        given = str(tmp_path)
    cfg = _config(tmp_path, MAC_SCRAPE_SHARDS="1", MAC_VMAGENT_BIN=given)
    with pytest.raises(CliError) as raised:
        scaleout.host_programs(cfg)
    assert raised.value.message.startswith(f"MAC_VMAGENT_BIN={given} is not an executable file")
    assert "mac env unset MAC_VMAGENT_BIN" in raised.value.commands


def test_a_program_path_is_mounted_as_the_engine_runs_it_and_backups_mount_theirs(tmp_path):
    program = tmp_path / "vm" / "vmbackup"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    given = f"{tmp_path}//vm/./vmbackup"  # as typed: the same file
    cfg = _config(tmp_path, MAC_SCRAPE_SHARDS="1", MAC_VMBACKUP_BIN=given)
    layout = docker_layout(cfg)
    assert scaleout.binary(cfg, layout, "MAC_VMBACKUP_BIN", "vmbackup") == str(program)
    assert scaleout.host_programs(cfg) == [str(program)]
    argv = DockerRuntime(tmp_path).one_off(["x"], programs=[program])
    assert f"{program}:{program}:ro" in argv
