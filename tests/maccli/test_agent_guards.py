"""The guard that sends a user to `sudo mac start agent`: under sudo, ~/.mac/env is root's,
so what the user saved there is not read; it says so and gives the per-node command.

Configurations are built from files under tmp_path; the machine's own are never read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from maccli.agent import guards
from maccli.output import CliError
from node.config import NodeConfig


def _config(tmp_path: Path, node: str = "", user: str = "") -> NodeConfig:
    node_file, user_file = tmp_path / "node.env", tmp_path / "home" / ".mac" / "env"
    user_file.parent.mkdir(parents=True, exist_ok=True)
    node_file.write_text(node)
    user_file.write_text(user)
    return NodeConfig.load(
        {"MAC_NODE_ENV_FILE": str(node_file), "MAC_USER_ENV_FILE": str(user_file)}
    )


@pytest.fixture
def root_only(monkeypatch):
    """The per-node file as a user sees it: only root may write it (the tests run as root)."""
    monkeypatch.setattr(guards, "_can_write", lambda path: False)


def test_master_ip_only_in_the_per_user_file_gets_the_per_node_command(tmp_path, root_only):
    cfg = _config(tmp_path, user="MASTER_IP=10.0.0.5\n")
    with pytest.raises(CliError) as caught:
        guards.require_node_file_writable(cfg)
    error = caught.value
    assert "only root can write" in error.message
    assert f"values in {cfg.user_file} are not read under sudo" in error.hint
    assert error.commands == ["sudo mac env set --node MASTER_IP=10.0.0.5", "sudo mac start agent"]


def test_master_ip_in_the_per_node_file_needs_only_sudo(tmp_path, root_only):
    cfg = _config(tmp_path, node="MASTER_IP=10.0.0.9\n", user="MASTER_IP=10.0.0.5\n")
    with pytest.raises(CliError) as caught:
        guards.require_node_file_writable(cfg)
    assert caught.value.commands == ["sudo mac start agent"]
    assert "not read under sudo" in caught.value.hint


def test_a_writable_node_file_passes(tmp_path):
    guards.require_node_file_writable(_config(tmp_path, user="MASTER_IP=10.0.0.5\n"))


def _no_master_ip(cfg: NodeConfig) -> CliError:
    with pytest.raises(CliError) as caught:
        guards.require_master_ip(cfg)
    assert caught.value.message == "MASTER_IP is required."  # the contract's words
    return caught.value


PER_NODE = ["sudo mac env set --node MASTER_IP=<master-ip>", "sudo mac start agent"]


def test_a_user_without_master_ip_is_given_the_per_node_commands(tmp_path, monkeypatch):
    """The guide's `mac env set MASTER_IP=...` then `mac start agent` cannot work for a
    user: the start stops at the root-only per-node file, and under sudo ~/.mac/env is
    root's. So the commands given are the ones that do."""
    monkeypatch.setattr(guards.os, "geteuid", lambda: 1000)
    error = _no_master_ip(_config(tmp_path))
    assert error.commands == PER_NODE
    assert "per-node file" in error.hint and "sudo" in error.hint


def test_root_under_sudo_or_without_the_node_file_is_given_the_per_node_commands(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(guards.os, "geteuid", lambda: 0)
    monkeypatch.setenv("SUDO_USER", "op")
    assert _no_master_ip(_config(tmp_path)).commands == PER_NODE
    monkeypatch.delenv("SUDO_USER")
    monkeypatch.setattr(guards, "_can_write", lambda path: False)
    assert _no_master_ip(_config(tmp_path)).commands == PER_NODE


def test_root_that_can_write_the_node_file_is_given_the_guide_s_commands(tmp_path, monkeypatch):
    monkeypatch.setattr(guards.os, "geteuid", lambda: 0)
    monkeypatch.delenv("SUDO_USER", raising=False)
    commands = _no_master_ip(_config(tmp_path)).commands
    assert commands[:2] == ["mac env set MASTER_IP=<master-ip>", "mac start agent"]


def test_start_agent_as_a_user_prints_the_contract_line_then_the_per_node_commands(
    files, monkeypatch, capsys
):
    from maccli.main import main

    monkeypatch.setattr(guards.os, "geteuid", lambda: 1000)
    assert main(["start", "agent"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "Error: MASTER_IP is required."
    assert [line.strip() for line in lines[2:]] == PER_NODE


def test_master_ip_from_the_environment_is_saved_first_since_sudo_drops_it(tmp_path, root_only):
    node_file, user_file = tmp_path / "node.env", tmp_path / "home" / ".mac" / "env"
    user_file.parent.mkdir(parents=True)
    cfg = NodeConfig.load(
        {
            "MAC_NODE_ENV_FILE": str(node_file),
            "MAC_USER_ENV_FILE": str(user_file),
            "MASTER_IP": "10.0.0.7",
        }
    )
    with pytest.raises(CliError) as caught:
        guards.require_node_file_writable(cfg)
    assert caught.value.commands == [
        "sudo mac env set --node MASTER_IP=10.0.0.7",
        "sudo mac start agent",
    ]
