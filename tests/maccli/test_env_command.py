"""`mac env set|get|unset|list` through the real command line."""

from __future__ import annotations

import stat


def test_set_writes_the_per_user_file_and_get_reads_it(mac_env):
    result = mac_env.run("env", "set", "MASTER_IP=10.0.0.5")
    assert result.returncode == 0, result.stderr
    assert f"Saved MASTER_IP=10.0.0.5 to {mac_env.user_file} (per-user)." in result.stdout
    assert mac_env.user_file.read_text() == "MASTER_IP=10.0.0.5\n"
    got = mac_env.run("env", "get", "MASTER_IP")
    assert got.returncode == 0 and got.stdout.strip() == "10.0.0.5"


def test_set_node_writes_a_root_only_per_node_file(mac_env):
    result = mac_env.run("env", "set", "--node", "MAC_JOIN_TOKEN=s3cret-token-value")
    assert result.returncode == 0, result.stderr
    assert "****alue" in result.stdout and "s3cret" not in result.stdout
    assert stat.S_IMODE(mac_env.node_file.stat().st_mode) == 0o600
    assert "MAC_JOIN_TOKEN=s3cret-token-value" in mac_env.node_file.read_text()


def test_list_shows_values_and_their_sources_with_secrets_masked(mac_env):
    mac_env.run("env", "set", "MASTER_IP=10.0.0.5")
    mac_env.run("env", "set", "--node", "NODE_NAME=gpu-7")
    mac_env.run("env", "set", "--node", "MAC_NODE_KEY=abcdefghijklmnop")
    result = mac_env.run("env", "list", extra={"MAC_PORT_OFFSET": "5"})
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line}
    assert lines["MASTER_IP"] == ["10.0.0.5", str(mac_env.user_file)]
    assert lines["NODE_NAME"] == ["gpu-7", str(mac_env.node_file)]
    assert lines["MAC_PORT_OFFSET"] == ["5", "environment"]
    assert lines["MAC_MASTER_PORT"] == ["28080", "default"]
    assert lines["MAC_NODE_KEY"][0] == "****mnop"


def test_node_file_value_beats_user_file_and_set_warns_about_it(mac_env):
    mac_env.run("env", "set", "--node", "MASTER_IP=10.0.0.9")
    result = mac_env.run("env", "set", "MASTER_IP=10.0.0.5")
    assert "also set in the per-node file, which takes precedence" in result.stderr
    assert mac_env.run("env", "get", "MASTER_IP").stdout.strip() == "10.0.0.9"


def test_unset_removes_the_key(mac_env):
    mac_env.run("env", "set", "MASTER_IP=10.0.0.5")
    result = mac_env.run("env", "unset", "MASTER_IP")
    assert result.returncode == 0 and "Removed MASTER_IP" in result.stdout
    missing = mac_env.run("env", "get", "MASTER_IP")
    assert missing.returncode == 1
    assert "Error: MASTER_IP is not set." in missing.stderr
    assert "mac env set MASTER_IP=<value>" in missing.stderr


def test_bad_values_are_refused_with_the_key_named(mac_env):
    result = mac_env.run("env", "set", "MASTER_IP=10.0.0.5 && rm")
    assert result.returncode == 1
    assert "Error: MASTER_IP='10.0.0.5 && rm' is neither an IP address nor a host name: " in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    assert mac_env.run("env", "set", "NOEQUALS").returncode == 1
    drain = mac_env.run("env", "set", "MAC_SLURM_DRAIN=yes")
    assert drain.returncode == 1
    assert "MAC_SLURM_DRAIN='yes': use off (the default), dry-run" in drain.stderr
    window = mac_env.run("env", "set", "MAC_GPU_EVIDENCE_WINDOW=soon")
    assert window.returncode == 1
    assert "MAC_GPU_EVIDENCE_WINDOW='soon' is not a number: use a number of seconds from 1 " in (
        window.stderr
    )
    names = mac_env.run("env", "set", "MAC_SLURM_NODE_MAP=gpu01:gpu-01")
    assert names.returncode == 1 and "Traceback" not in names.stderr
    assert "MAC_SLURM_NODE_MAP='gpu01:gpu-01': 'gpu01:gpu-01' is not hostname=NodeName" in (
        names.stderr
    )
    assert not mac_env.user_file.exists()
    assert mac_env.run("env", "set", "MAC_GPU_EVIDENCE_WINDOW=600").returncode == 0


def test_node_name_in_a_shared_home_is_refused_naming_the_per_node_file(mac_env):
    mac_env.shared_home("nfs4")
    result = mac_env.run("env", "set", "NODE_NAME=gpu-1")
    assert result.returncode == 1
    assert f"Error: NODE_NAME must not be set in the shared per-user file {mac_env.user_file}." in (
        result.stderr
    )
    assert str(mac_env.node_file) in result.stderr
    assert "sudo mac env set --node NODE_NAME=gpu-1" in result.stderr
    assert not mac_env.user_file.exists()
    # --force never lets NODE_NAME into a shared home.
    assert mac_env.run("env", "set", "--force", "NODE_NAME=gpu-1").returncode == 1


def test_master_ip_in_a_shared_home_is_refused_unless_forced(mac_env):
    mac_env.shared_home("lustre")
    refused = mac_env.run("env", "set", "MASTER_IP=10.0.0.5")
    assert refused.returncode == 1
    assert "sudo mac env set --node MASTER_IP=10.0.0.5" in refused.stderr
    forced = mac_env.run("env", "set", "--force", "MASTER_IP=10.0.0.5")
    assert forced.returncode == 0
    assert "which every node reads" in forced.stderr


def test_per_node_keys_are_accepted_in_a_local_home(mac_env):
    assert mac_env.run("env", "set", "NODE_NAME=gpu-1").returncode == 0
    assert mac_env.run("env", "get", "NODE_NAME").stdout.strip() == "gpu-1"
    assert mac_env.user_file.read_text() == "NODE_NAME=gpu-1\n"


def test_a_misspelt_setting_is_refused_with_the_one_meant(mac_env):
    refused = mac_env.run("env", "set", "MAC_PROBE_INTERVALL=10")
    assert refused.returncode == 1
    assert "MAC_PROBE_INTERVALL is not a setting of MAC. Did you mean MAC_PROBE_INTERVAL?" in (
        refused.stderr
    )
    assert "mac env set MAC_PROBE_INTERVAL=10" in refused.stderr
    assert not mac_env.user_file.exists()


def test_every_declared_secret_is_masked(mac_env):
    mac_env.run("env", "set", "--node", "MAC_BMC_REDFISH_PASSWORD=hunter2-and-more")
    shown = mac_env.run("env", "list").stdout
    assert "****more" in shown and "hunter2" not in shown
