"""docker/docker-compose.master.yml is written from the master's specs (maccli.master.compose):
the committed file is what they write, Compose reads it as written, a flag changed in
the specs changes both runtimes, and the settings reach the containers."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from contract.settings import CATALOG, Applies, SetWith, Side
from maccli.master import compose, specs
from maccli.master.layout import docker_layout, process_layout
from node.config import NodeConfig

REPO = Path(__file__).resolve().parents[2]


def _config(**values: str) -> NodeConfig:
    # No slurm.conf unless a test gives one: the host's own must not reach the file.
    environ = {"SLURM_CONF": "/nonexistent/slurm.conf", **values}
    return NodeConfig(
        environ=environ, node_values={}, user_values={}, node_file=Path("/nonexistent/node"),
        user_file=Path("/nonexistent/user"),
    )  # fmt: skip


def _compose_config(path: Path, env: dict[str, str] | None = None) -> str:
    """`docker-compose config` (1.29, no engine needed): the file as Compose reads it."""
    done = subprocess.run(
        ["docker-compose", "-p", "mac", "-f", str(path), "config"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_committed_master_file_is_what_the_specs_write():
    assert compose.COMMITTED.read_text() == compose.render(compose.default_config()), (
        "docker/docker-compose.master.yml is stale: python -m maccli.master.compose --write"
    )
    assert compose.main([]) == 0  # the command that says so


def test_compose_reads_the_written_file_as_the_committed_one(tmp_path):
    written = compose.write(_config(), tmp_path)
    assert _compose_config(written) == _compose_config(compose.COMMITTED)


def test_one_prometheus_flag_changed_in_the_specs_changes_both_runtimes(monkeypatch, tmp_path):
    flag = "--query.timeout=1m"
    cfg = _config(MAC_DATA_DIR=str(tmp_path))
    monkeypatch.setattr(specs, "PROMETHEUS_FLAGS", [*specs.PROMETHEUS_FLAGS, flag])

    process = {s.name: s for s in specs.master_specs(cfg, process_layout(cfg))}
    assert flag in process["prometheus"].argv

    written = compose.write(cfg, tmp_path)
    command = yaml.safe_load(_compose_config(written))["services"]["prometheus"]["command"]
    assert command[:2] == ["sh", "-c"] and f" {flag}" in command[2]
    assert f" {flag}" not in compose.COMMITTED.read_text()


def _django_commands(steps: list[list[str]]) -> set[str]:
    """The Django commands of start steps, those run through `sh -c` too."""
    found = set()
    for step in steps:
        words = shlex.split(step[2]) if step[:2] == ["sh", "-c"] else step
        if "django" in words:
            found.add(words[words.index("django") + 1])
    return found


def test_both_runtimes_run_the_same_prestart_and_servers():
    """The same commands, each where its runtime puts it: only the paths, addresses and
    interpreter differ (the Layout), and Compose adds the admin user and channels, and
    its own Redis (the process runtime uses the host's)."""
    cfg = _config()
    here = {s.name: s for s in specs.master_specs(cfg, process_layout(cfg))}
    there = {s.name: s for s in specs.master_specs(cfg, docker_layout(cfg))}
    assert set(here) == set(there) - {"redis"}
    for name, spec in here.items():
        assert len(spec.argv) == len(there[name].argv), name
        assert _django_commands(spec.prestart) <= _django_commands(
            [step for s in there.values() for step in s.prestart]
        ), name


def _readme_settings_for_docker() -> list[str]:
    """Settings the README lists for the master that its tables say work under Docker,
    but those read by `mac` alone before the files (the process environment's)."""
    return sorted(
        name
        for name, item in CATALOG.items()
        if item.readme
        and item.side in (Side.MASTER, Side.BOTH)
        and item.applies is not Applies.PROCESS
        and item.set_with is not SetWith.ENVIRONMENT
    )


def test_each_setting_the_readme_lists_reaches_the_containers_or_says_its_runtime(tmp_path):
    listed = _readme_settings_for_docker()
    assert "MAC_PROBE_INTERVAL" in listed and "MAC_SCRAPE_INTERVAL" in listed
    # As `mac start master` hands them to Compose: from its environment and env files.
    given = {name: f"value-of-{name.lower()}" for name in listed}
    resolved = yaml.safe_load(_compose_config(compose.COMMITTED, given))["services"]
    reached = {
        name
        for service in resolved.values()
        for name, value in (service.get("environment") or {}).items()
        if value == given.get(name)
    }
    missing = sorted(set(listed) - reached - {"MAC_ALERTMANAGER_URL"})
    assert not missing, f"listed for Docker but not in the containers: {missing}"
    # The rest says its runtime in the tables, which come from the same declaration.
    readme = (REPO / "README.md").read_text()
    for name, item in CATALOG.items():
        if item.readme and item.applies is Applies.PROCESS:
            row = next(line for line in readme.splitlines() if f"`{name}`" in line)
            assert "process only" in row, name


def test_a_site_s_alertmanager_replaces_mac_s_own_under_docker(tmp_path):
    site = "http://alertmanager.site.example:9093"
    document = compose.document(_config(MAC_ALERTMANAGER_URL=site))
    services = document["services"]
    assert "alertmanager" not in services
    assert "mac-alertmanager:29093" not in str(document)
    assert "mac-alertmanager" not in document["volumes"]  # its silences' volume
    environment = services["api-server"]["environment"]
    assert environment["MAC_ALERTMANAGER_URL"] == site
    assert environment["MAC_ALERTMANAGER_MANAGED"] == "0"
    api = services["api-server"]["command"][2]
    assert "alertmanager_config" not in api and "--alertmanager" not in str(services["proxy"])


def test_mac_prometheus_loads_what_mac_writes_from_its_settings():
    """MAC_SCRAPE_INTERVAL, MAC_ALERT_FOR and MAC_RUNBOOK_BASE_URL reach the container that
    writes mac-prometheus's configuration and rules (issue 34: the static file did not)."""
    prometheus = compose.document(_config())["services"]["prometheus"]
    script = prometheus["command"][2]
    write = script.index("python -m django prometheus_config --out /tmp/mac-prometheus/")
    assert write < script.index("exec /usr/bin/prometheus --config.file=/tmp/mac-prometheus/")
    names = ("MAC_SCRAPE_INTERVAL", "MAC_ALERT_FOR", "MAC_RUNBOOK_BASE_URL", "MAC_METRICS_TOKEN")
    for name in names:
        assert name in prometheus["environment"] and prometheus["environment"][name] is None


def test_secrets_are_passed_through_never_written(tmp_path):
    secret = "s3cret-token-value"
    cfg = _config(MAC_METRICS_TOKEN=secret, MAC_JOIN_TOKEN=secret, MAC_SMTP_PASSWORD=secret)
    assert secret not in compose.write(cfg, tmp_path).read_text()


@pytest.mark.parametrize("value", ["4", "7"])
def test_a_setting_mac_reads_is_written_into_the_file(tmp_path, value):
    document = compose.document(_config(MAC_API_WORKERS=value, MAC_MASTER_PORT="28123"))
    assert f"--workers {value} " in document["services"]["api-server"]["command"][2]
    assert document["services"]["proxy"]["ports"][0] == "28123:28080"


def test_every_container_but_beat_has_its_own_health_check(tmp_path):
    """Docker's health of each container (`docker ps`, `mac status`): mac-redis answers
    PING, Prometheus and Alertmanager their /-/ready, the worker a Celery ping of its own
    node name, the process runtime's health command run in its container."""
    services = compose.document(_config())["services"]
    assert "healthcheck" not in services["beat"]  # beat answers nothing (docs/operations.md)
    tests = {name: s["healthcheck"]["test"] for name, s in services.items() if name != "beat"}
    assert tests["redis"] == ["CMD", "redis-cli", "ping"]
    assert tests["prometheus"][-1] == "http://127.0.0.1:29090/-/ready"
    assert tests["alertmanager"][-1] == "http://127.0.0.1:29093/-/ready"
    assert tests["api-server"][-1] == tests["proxy"][-1] == "http://127.0.0.1:28080/health"
    cfg = _config(MAC_DATA_DIR=str(tmp_path))
    process = {s.name: s for s in specs.master_specs(cfg, process_layout(cfg))}
    ping = process["worker"].health_command
    assert ping[1:4] == ["-m", "celery", "-b"] and ping[-2] == "-d"
    assert "-n mac-worker@%h" in services["worker"]["command"][2]
    assert tests["worker"][:3] == ["CMD", "sh", "-c"]
    assert shlex.split(tests["worker"][3]) == [
        "python", *ping[1:4], "redis://redis:6379/0", *ping[5:-1], "mac-worker@$$HOSTNAME"
    ]  # fmt: skip
    # Compose leaves the container's own host name alone (not the host's HOSTNAME).
    resolved = yaml.safe_load(_compose_config(compose.COMMITTED, {"HOSTNAME": "the-host"}))
    worker_test = resolved["services"]["worker"]["healthcheck"]["test"]
    assert "mac-worker@the-host" not in str(worker_test) and "HOSTNAME" in str(worker_test)


def test_secrets_reach_only_the_containers_that_read_them():
    """`docker inspect` of mac-proxy, mac-beat, mac-alertmanager or mac-redis shows no
    secret: each goes to its readers alone, and the others keep every other setting."""
    secrets = compose.secrets()
    assert {"DATABASE_URL", "MAC_ADMIN_PASSWORD", "MAC_SMTP_PASSWORD"} <= set(secrets)
    assert set(secrets) <= set(compose.SECRET_READERS), "a secret nobody reads is given"
    given = {name: f"value-of-{name.lower()}" for name in [*secrets, "MAC_PROBE_INTERVAL"]}
    resolved = yaml.safe_load(_compose_config(compose.COMMITTED, given))["services"]
    seen = {
        name: {key for key, value in (service.get("environment") or {}).items() if value}
        for name, service in resolved.items()
    }
    assert seen["api-server"] >= set(secrets)
    assert seen["worker"] & set(secrets) == {"DATABASE_URL"}
    assert seen["prometheus"] & set(secrets) == {"MAC_METRICS_TOKEN"}
    for name in ("proxy", "beat", "alertmanager", "redis"):
        assert not seen[name] & set(secrets), name
    for name in ("api-server", "worker", "beat", "proxy", "prometheus", "alertmanager"):
        assert "MAC_PROBE_INTERVAL" in seen[name], name


def test_createadmin_says_its_password_into_a_file_only_root_reads_never_the_log():
    api = compose.document(_config())["services"]["api-server"]["command"][2]
    step = "sh -c 'umask 077 && python -m django createadmin >> /var/lib/mac/createadmin.txt'"
    assert f"{step} &&" in api
    assert "python -m django createadmin &&" not in api
