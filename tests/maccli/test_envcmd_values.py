"""`mac env` with values that need quoting, keys written twice, a per-node file this user
cannot read, per-node keys in a shared home, and the fix commands it prints.

Every file is under tmp_path (the mac_env fixture, or `files` in conftest.py for runs in this
process): the machine's own /etc/mango/mac/env and ~/.mac/env are never read or written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from maccli.main import main
from node import config as node_config

SECRET = "s3cret pa$$ word"


def test_a_value_with_a_comment_sign_or_quotes_reads_back_exactly(mac_env):
    mac_env.run("env", "set", "MASTER_IP=10.0.0.5")
    for value in ("a #b", '"quoted"', "'x", '"unclosed', 'p"a\\ss #1'):
        result = mac_env.run("env", "set", f"OTHER={value}")
        assert result.returncode == 0, result.stderr
        got = mac_env.run("env", "get", "OTHER")
        assert got.returncode == 0, got.stderr
        assert got.stdout.rstrip("\n") == value
        # The setting after it is still there (an unclosed quote swallowed it before).
        assert mac_env.run("env", "get", "MASTER_IP").stdout.strip() == "10.0.0.5"
    assert "could not parse" not in got.stderr


def test_a_secret_with_spaces_and_dollars_reads_back_and_is_never_shown(mac_env):
    result = mac_env.run("env", "set", "--node", f"MAC_BMC_REDFISH_PASSWORD={SECRET} #x")
    assert result.returncode == 0, result.stderr
    assert "s3cret" not in result.stdout + result.stderr
    got = mac_env.run("env", "get", "MAC_BMC_REDFISH_PASSWORD")
    assert got.stdout.rstrip("\n") == f"{SECRET} #x"


def test_set_and_unset_act_on_a_key_written_twice(mac_env):
    mac_env.user_file.write_text("MASTER_IP=10.0.0.1\nOTHER=x\nMASTER_IP=10.0.0.2\n")
    result = mac_env.run("env", "set", "MASTER_IP=10.0.0.7")
    assert result.returncode == 0 and "Saved MASTER_IP=10.0.0.7" in result.stdout
    assert mac_env.run("env", "get", "MASTER_IP").stdout.strip() == "10.0.0.7"
    assert mac_env.user_file.read_text() == "MASTER_IP=10.0.0.7\nOTHER=x\n"
    mac_env.user_file.write_text("MASTER_IP=10.0.0.1\nOTHER=x\nMASTER_IP=10.0.0.2\n")
    removed = mac_env.run("env", "unset", "MASTER_IP")
    assert removed.returncode == 0 and "Removed MASTER_IP" in removed.stdout
    assert mac_env.run("env", "get", "MASTER_IP").returncode == 1
    assert mac_env.user_file.read_text() == "OTHER=x\n"


# --- shared home: every per-node value is refused in the per-user file ------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("MAC_AGENT_IP", "10.0.0.17"),
        ("MAC_BIND", "10.0.0.17"),
        ("MAC_NODE_KEY", "nodekey-0123456789abcdef"),
    ],
)
def test_per_node_addresses_and_the_node_key_are_refused_in_a_shared_home(mac_env, key, value):
    mac_env.shared_home("nfs4")
    for args in (("env", "set", f"{key}={value}"), ("env", "set", "--force", f"{key}={value}")):
        result = mac_env.run(*args)
        assert result.returncode == 1, result.stdout
        assert f"Error: {key} must not be set in the shared per-user file {mac_env.user_file}." in (
            result.stderr
        )
        assert str(mac_env.node_file) in result.stderr
    shown = "<value>" if key == "MAC_NODE_KEY" else value
    assert f"sudo mac env set --node {key}={shown}" in result.stderr
    assert "nodekey" not in result.stderr
    assert not mac_env.user_file.exists()


def test_a_wildcard_bind_address_is_no_per_node_value(mac_env):
    mac_env.shared_home("nfs4")
    result = mac_env.run("env", "set", "MAC_BIND=0.0.0.0")
    assert result.returncode == 0, result.stderr
    assert mac_env.run("env", "get", "MAC_BIND").stdout.strip() == "0.0.0.0"


def test_per_node_addresses_are_accepted_in_a_local_home(mac_env):
    assert mac_env.run("env", "set", "MAC_AGENT_IP=10.0.0.17").returncode == 0
    assert mac_env.run("env", "set", "MAC_BIND=10.0.0.17").returncode == 0
    for key in ("MAC_AGENT_IP", "MAC_BIND"):
        assert mac_env.run("env", "get", key).stdout.strip() == "10.0.0.17"
    written = mac_env.user_file.read_text().splitlines()
    assert sorted(written) == ["MAC_AGENT_IP=10.0.0.17", "MAC_BIND=10.0.0.17"]


# --- the fix commands it prints: quoted, secrets as <value> --------------------------------


def test_a_misspelt_secret_is_named_without_its_value(mac_env):
    result = mac_env.run("env", "set", f"MAC_BMC_REDFISH_PASSWROD={SECRET}")
    assert result.returncode == 1
    assert "Did you mean MAC_BMC_REDFISH_PASSWORD?" in result.stderr
    assert "mac env set MAC_BMC_REDFISH_PASSWORD=<value>" in result.stderr
    assert "s3cret" not in result.stderr


def test_an_environment_only_setting_is_shown_quoted(mac_env):
    result = mac_env.run("env", "set", "MAC_USER_ENV_FILE=/tmp/my env")
    assert result.returncode == 1
    assert "(e.g. 'MAC_USER_ENV_FILE=/tmp/my env' mac ...)" in result.stderr


@pytest.fixture
def root_only_node_dir(files, monkeypatch):
    """The per-node file's folder as a user sees it: not writable (the tests run as root)."""
    _, node_file = files
    node_file.parent.mkdir(parents=True)
    real = os.access

    def access(path, mode, *args, **kwargs):
        if Path(path) in (node_file, node_file.parent) and mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    return node_file


def test_a_sudo_command_quotes_the_value_and_hides_a_secret(root_only_node_dir, capsys):
    assert main(["env", "set", "--node", "OTHER=a b $x"]) == 1
    said = capsys.readouterr().err
    assert "sudo mac env set --node 'OTHER=a b $x'" in said
    assert main(["env", "set", "--node", f"MAC_BMC_REDFISH_PASSWORD={SECRET}"]) == 1
    said = capsys.readouterr().err
    assert "sudo mac env set --node MAC_BMC_REDFISH_PASSWORD=<value>" in said
    assert "s3cret" not in said
    assert not root_only_node_dir.exists()


# --- a per-node file this user cannot read ------------------------------------------------


@pytest.fixture
def unreadable_node_file(files, monkeypatch):
    """The per-node file there but root-only, as a user sees it (the tests run as root)."""
    _, node_file = files
    node_file.parent.mkdir(parents=True)
    node_file.write_text("MASTER_IP=10.0.0.9\n")
    read = node_config.read_env_file

    def read_env_file(path):
        if Path(path) == node_file:
            raise PermissionError(13, "Permission denied", str(path))
        return read(path)

    monkeypatch.setattr(node_config, "read_env_file", read_env_file)
    return node_file


def test_unset_node_of_a_file_it_cannot_read_is_a_permission_error(unreadable_node_file, capsys):
    code = main(["env", "unset", "--node", "MASTER_IP"])
    said = capsys.readouterr()
    assert code == 1, said
    assert "nothing to do" not in said.out + said.err
    assert f"cannot read {unreadable_node_file}: permission denied" in said.err
    assert "sudo mac env unset --node MASTER_IP" in said.err
    assert unreadable_node_file.read_text() == "MASTER_IP=10.0.0.9\n"


def test_set_warns_that_a_per_node_file_it_cannot_read_may_override(
    unreadable_node_file, files, capsys
):
    user_file, _ = files
    code = main(["env", "set", "MASTER_IP=10.0.0.5"])
    said = capsys.readouterr()
    assert code == 0, said
    assert f"Saved MASTER_IP=10.0.0.5 to {user_file} (per-user)." in said.out
    assert f"{unreadable_node_file} is readable by root only" in said.err
    assert "may set MASTER_IP too, and it takes precedence" in said.err
    assert "sudo mac env get MASTER_IP" in said.err


def test_unset_of_the_per_user_value_warns_that_the_per_node_file_may_still_set_it(
    unreadable_node_file, files, capsys
):
    user_file, _ = files
    user_file.write_text("MASTER_IP=10.0.0.5\n")
    assert main(["env", "unset", "MASTER_IP"]) == 0
    said = capsys.readouterr()
    assert f"Removed MASTER_IP from {user_file}." in said.out
    assert f"{unreadable_node_file} is readable by root only: it may still set MASTER_IP" in (
        said.err
    )


def test_unset_never_shows_a_secret_that_still_comes_from_elsewhere(mac_env):
    mac_env.run("env", "set", "MAC_JOIN_TOKEN=token-in-the-user-file")
    result = mac_env.run(
        "env", "unset", "MAC_JOIN_TOKEN", extra={"MAC_JOIN_TOKEN": "from-env-s3cret"}
    )
    assert result.returncode == 0, result.stderr
    assert "still comes from the environment" in result.stderr
    assert "s3cret" not in result.stderr and "****cret" in result.stderr
