"""The layered configuration: precedence, env file round trips, shared-home detection."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from maccli.envvalues import validate
from node.config import (
    ConfigError,
    NodeConfig,
    Source,
    filesystem_of,
)
from node.envfile import parse_env_text, write_env_file
from node.host import Roots


def _config(tmp_path, environ=None, node="", user=""):
    node_file = tmp_path / "node.env"
    user_file = tmp_path / "home" / ".mac" / "env"
    user_file.parent.mkdir(parents=True, exist_ok=True)
    if node:
        node_file.write_text(node)
    if user:
        user_file.write_text(user)
    base = {
        "MAC_NODE_ENV_FILE": str(node_file),
        "MAC_USER_ENV_FILE": str(user_file),
        "MAC_PROC_ROOT": str(tmp_path / "proc"),
    }
    return NodeConfig.load({**base, **(environ or {})})


def test_process_env_beats_node_file_beats_user_file_beats_defaults(tmp_path):
    cfg = _config(
        tmp_path,
        environ={"MASTER_IP": "10.0.0.1"},
        node="MASTER_IP=10.0.0.2\nMAC_MASTER_PORT=28081\n",
        user="MASTER_IP=10.0.0.3\nMAC_MASTER_PORT=28082\nMAC_RUNTIME=process\n",
    )
    assert cfg.lookup("MASTER_IP") == ("10.0.0.1", Source.PROCESS)
    assert cfg.lookup("MAC_MASTER_PORT") == ("28081", Source.NODE)
    assert cfg.lookup("MAC_RUNTIME") == ("process", Source.USER)
    assert cfg.lookup("MAC_BIND") == ("0.0.0.0", Source.DEFAULT)
    assert cfg.lookup("UNKNOWN_KEY") == (None, None)
    assert cfg.master_url == "http://10.0.0.1:28081"


def test_merged_lists_every_key_with_its_winning_source(tmp_path):
    cfg = _config(tmp_path, node="NODE_NAME=gpu-7\n", user="NODE_NAME=shadowed\nMAC_LABELS=a=b\n")
    merged = cfg.merged()
    assert merged["NODE_NAME"] == ("gpu-7", Source.NODE)
    assert merged["MAC_LABELS"] == ("a=b", Source.USER)


def test_parse_env_text_reads_inline_comments_as_compose_does():
    assert parse_env_text("A=1 # note\nB='x # y'\nC=\"q\" # z\n") == {
        "A": "1",
        "B": "x # y",
        "C": "q",
    }


def test_parse_env_text_handles_comments_quotes_and_export():
    text = '# comment\nexport MASTER_IP="10.1.2.3"\nNODE_NAME = gpu-1\nbad line\n lower=x\n'
    assert parse_env_text(text) == {"MASTER_IP": "10.1.2.3", "NODE_NAME": "gpu-1"}


def test_write_env_file_keeps_other_lines_and_sets_mode(tmp_path):
    path = tmp_path / "etc" / "env"
    path.parent.mkdir()
    path.write_text("# keep me\nA=1\nB=2\n")
    write_env_file(path, {"A": "10", "C": "3", "B": None}, mode=0o600)
    assert path.read_text() == "# keep me\nA=10\nC=3\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_node_name_defaults_to_host_name_and_keeps_explicit_empty(tmp_path):
    cfg = _config(tmp_path)
    assert cfg.node_name("GPU-01") == ("gpu-01", None)
    cfg = _config(tmp_path, environ={"NODE_NAME": ""})
    assert cfg.node_name("gpu-01") == ("", Source.PROCESS)


def test_service_ports_follow_offset_and_per_service_override(tmp_path):
    cfg = _config(tmp_path, environ={"MAC_PORT_OFFSET": "1000", "MAC_NIC_EXPORTER_PORT": "40000"})
    assert cfg.service_port("sys-exporter") == 30101
    assert cfg.service_port("nic-exporter") == 40000


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("MASTER_IP", "not an ip!", "neither an IP address nor a host name"),
        # Digits and dots are an address (no host name ends in a numeric label), mistyped.
        ("MASTER_IP", "10.0.0.256", "not a valid IPv4 address: give four numbers from 0"),
        ("MASTER_IP", "10.0.0", "not a valid IPv4 address"),
        # resolvers read 010 as octal: 8.0.0.5
        ("MASTER_IP", "010.0.0.5", "from 0 to 255 without leading zeros"),
        ("MASTER_IP", "10.0.0.1\nNODE_NAME=x", "line break"),
        ("NODE_NAME", "under_score", "not a valid host name"),
        ("lower", "x", "not a valid name"),
        ("MAC_MASTER_PORT", "70000", "not a TCP port"),
        ("MAC_RUNTIME", "podman", "is not a runtime: use auto .*, docker .* or process"),
        ("MAC_SCRAPE_SHARDS", "65", "out of range: use a whole number from 0 to 64"),
        ("MAC_HTTP", "maybe", "is not an HTTP mode: use on .*, off .* or redirect"),
        ("MAC_SCRAPE_SHARDS", "x", "not a whole number"),
        ("MAC_PROBE_INTERVAL", "fast", "not a number: use a number of seconds from 0.5"),
        ("MAC_ALERT_GROUP_WAIT", "30 s", "not a duration"),
        ("MAC_NODE_NETWORKS", "10.0.0.0/8,lan", "MAC_NODE_NETWORKS='lan' is not a network"),
        ("MAC_BMC_REDFISH_URL", "bmc.local", "not a usable URL: give http:// or https://"),
        ("MAC_IPFORWARD_REASSERT", "sometimes", "not on or off: use 1 or 0"),
        ("MAC_PROBE_INTERVL", "10", "not a setting of MAC. Did you mean MAC_PROBE_INTERVAL"),
        ("MAC_NODE_ENV_FILE", "/tmp/n", "process environment only"),
        ("MASTER_IP", "", "mac env unset MASTER_IP"),
    ],
)
def test_validate_refuses_bad_values_naming_the_key(key, value, needle):
    with pytest.raises(ConfigError, match=needle):
        validate(key, value)


def test_validate_accepts_addresses_and_host_names():
    for value in ("10.0.0.5", "fd00::5", "master.cluster.local", "node7", "3com.example"):
        validate("MASTER_IP", value)


@pytest.mark.parametrize(
    "fstype", ["nfs", "nfs4", "cifs", "smb3", "fuse.sshfs", "lustre", "gpfs", "beegfs"]
)
def test_home_on_a_network_filesystem_is_detected(tmp_path, fstype):
    cfg = _config(tmp_path)
    home = cfg.user_file.parent.parent
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text(
        f"/dev/vda1 / ext4 rw 0 0\nfiler:/home {home} {fstype} rw 0 0\n"
    )
    shared, why = cfg.shared_home()
    assert shared and fstype in why


def test_local_home_is_not_shared_and_override_wins(tmp_path):
    cfg = _config(tmp_path)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text("/dev/vda1 / ext4 rw 0 0\n")
    assert cfg.shared_home() == (False, "")
    forced = _config(tmp_path, environ={"MAC_SHARED_HOME": "1"})
    assert forced.shared_home()[0] is True


def test_filesystem_of_picks_the_longest_mount_and_unescapes_spaces(tmp_path):
    (tmp_path / "mounts").write_text(
        "/dev/vda1 / ext4 rw 0 0\nfiler:/h /home nfs4 rw 0 0\nlocal /home/my\\040dir ext4 rw 0 0\n"
    )
    roots = Roots(proc_root=str(tmp_path))
    assert filesystem_of(Path("/home/op"), roots) == ("/home", "nfs4")
    assert filesystem_of(Path("/home/my dir/x"), roots) == ("/home/my dir", "ext4")
    assert filesystem_of(Path("/var"), roots) == ("/", "ext4")


def test_value_reads_a_declared_setting_as_its_kind_by_precedence(tmp_path):
    cfg = _config(
        tmp_path,
        environ={"MAC_PROBE_TIMEOUT": "4.5"},
        node="MAC_LABELS=rack=a1\nMAC_IPFORWARD_REASSERT=yes\n",
        user="MAC_IPFORWARD_REASSERT=0\nMAC_STATE_DIR=~/state\n",
    )
    assert cfg.value("MAC_PROBE_TIMEOUT") == 4.5
    assert cfg.value("MAC_LABELS") == {"rack": "a1"}
    assert cfg.value("MAC_IPFORWARD_REASSERT") is True
    assert cfg.state_dir == Path("~/state").expanduser()
    assert cfg.value("MAC_START_TIMEOUT") == 30.0  # the declared default
    assert cfg.value("MAC_SYS_EXPORTER_PORT") == 29101


def test_a_bad_value_names_the_setting_and_where_a_service_uses_the_default(tmp_path):
    cfg = _config(tmp_path, user="MAC_IPFORWARD_INTERVAL=often\n")
    with pytest.raises(ConfigError, match="MAC_IPFORWARD_INTERVAL='often' is not a number"):
        cfg.value("MAC_IPFORWARD_INTERVAL")
    said: list[str] = []
    assert cfg.value_or_default("MAC_IPFORWARD_INTERVAL", said.append) == 1.0
    assert said == [
        "MAC_IPFORWARD_INTERVAL='often' is not a number: use a number of seconds from 0.05 "
        "to 60. Using 1 instead."
    ]


def test_roots_come_from_the_mac_root_settings(tmp_path):
    cfg = _config(tmp_path, environ={"MAC_SYS_ROOT": "/s", "MAC_ETC_ROOT": "/e"})
    roots = cfg.roots()
    assert (roots.sys_root, roots.proc_root, roots.dev_root) == (
        "/s",
        str(tmp_path / "proc"),
        "/dev",
    )
    assert roots.host("/etc/machine-id") == Path("/e/machine-id")
    assert roots.host("/usr/lib") == Path("/usr/lib")


def test_a_bad_shared_home_override_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="MAC_SHARED_HOME='perhaps' is not on or off"):
        _config(tmp_path, environ={"MAC_SHARED_HOME": "perhaps"}).shared_home()


@pytest.mark.parametrize(
    ("key", "value", "per_node"),
    [
        ("MAC_BIND", "0.0.0.0", False),
        ("MAC_BIND", "::", False),
        ("MAC_BIND", "127.0.0.1", False),
        ("MAC_BIND", "10.0.0.17", True),
        ("MAC_BIND", "fd00::17", True),
        ("MAC_AGENT_IP", "10.0.0.17", True),
        ("MAC_NODE_KEY", "k", True),
        ("NODE_NAME", "gpu-1", True),
        ("MAC_LABELS", "rack=a1", False),
    ],
)
def test_per_node_values_are_the_ones_that_differ_between_nodes(key, value, per_node):
    from node.config import is_per_node

    assert is_per_node(key, value) is per_node
