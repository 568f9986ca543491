"""Settings the runtimes read from the env files: MAC_STOP_GRACE and MAC_PROBE_INTERVAL
through the settings catalogue (a clear error naming a bad one, never a traceback), and
MAC_IMAGE from the env files as Compose gets it.

Every file is under tmp_path: the machine's own env files are never read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from maccli.master.specs import master_specs
from maccli.runtimes.docker import DockerRuntime
from maccli.runtimes.select import choose_runtime
from node.config import ConfigError, NodeConfig
from node.runner import CommandResult


def _config(tmp_path: Path, user: str = "", **environ: str) -> NodeConfig:
    user_file = tmp_path / "user.env"
    user_file.write_text(user)
    return NodeConfig.load(
        {
            "MAC_NODE_ENV_FILE": str(tmp_path / "node.env"),
            "MAC_USER_ENV_FILE": str(user_file),
            "MAC_STATE_DIR": str(tmp_path / "state"),
            "MAC_DATA_DIR": str(tmp_path / "data"),
            "PATH": "/usr/bin:/bin",
            **environ,
        }
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("10s", "MAC_STOP_GRACE='10s' is not a number: use a number of seconds from 0 to 600"),
        ("nan", "MAC_STOP_GRACE='nan' is out of range"),
        ("-5", "MAC_STOP_GRACE='-5' is out of range"),
    ],
)
def test_a_bad_stop_grace_in_an_env_file_names_the_setting(tmp_path, value, words):
    cfg = _config(tmp_path, user=f"MAC_STOP_GRACE={value}\n")
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        choose_runtime(cfg, "agent", "process")


def test_a_good_stop_grace_is_the_process_runtimes_grace(tmp_path):
    assert choose_runtime(_config(tmp_path, user="MAC_STOP_GRACE=2.5\n"), "agent", "process").grace
    assert choose_runtime(_config(tmp_path), "agent", "process").grace == 10.0
    cfg = _config(tmp_path, user="MAC_STOP_GRACE=2.5\n")
    assert choose_runtime(cfg, "agent", "process").grace == 2.5


def test_mac_status_with_a_bad_stop_grace_is_an_error_not_a_traceback(mac_env):
    mac_env.user_file.write_text("MAC_STOP_GRACE=10s\n")
    for args in (("status",), ("stop", "agent")):
        result = mac_env.run(*args)
        assert result.returncode == 1, result.stdout
        assert "Traceback" not in result.stderr
        assert "Error: MAC_STOP_GRACE='10s' is not a number" in result.stderr


@pytest.mark.parametrize("value", ["10s", "nan", "-5"])
def test_a_bad_probe_interval_names_the_setting_in_scale_out_mode(tmp_path, value):
    cfg = _config(tmp_path, user=f"MAC_PROBE_INTERVAL={value}\n", MAC_SCRAPE_SHARDS="2")
    with pytest.raises(ConfigError, match=f"MAC_PROBE_INTERVAL='{value}' is"):
        master_specs(cfg)


def test_the_probe_interval_sets_the_scrapers_sd_check(tmp_path):
    cfg = _config(tmp_path, user="MAC_PROBE_INTERVAL=12.4\n", MAC_SCRAPE_SHARDS="2")
    scraper = {spec.name: spec for spec in master_specs(cfg)}["scraper-0"]
    assert any(arg.endswith("=12s") for arg in scraper.argv), scraper.argv


def test_the_image_set_in_an_env_file_is_the_one_checked(tmp_path, monkeypatch):
    user_file = tmp_path / "user.env"
    user_file.write_text("MAC_IMAGE=registry.local/mac:1.2\n")
    monkeypatch.setenv("MAC_USER_ENV_FILE", str(user_file))
    monkeypatch.setenv("MAC_NODE_ENV_FILE", str(tmp_path / "node.env"))
    monkeypatch.delenv("MAC_IMAGE", raising=False)
    asked: list[str] = []

    def run(argv, **_):
        if argv[:3] == ["docker", "image", "inspect"]:
            asked.append(argv[-1])
            return CommandResult(0 if argv[-1] == "registry.local/mac:1.2" else 1, "sha256:x", "")
        return CommandResult(1, "", "")

    runtime = DockerRuntime(tmp_path, run=run)
    assert runtime.image == "registry.local/mac:1.2"
    runtime._ensure_image()  # present: no "docker load" error
    assert asked == ["registry.local/mac:1.2"]
    # The process environment still wins, as it does for Compose.
    monkeypatch.setenv("MAC_IMAGE", "mac:test")
    assert DockerRuntime(tmp_path, run=run).image == "mac:test"
