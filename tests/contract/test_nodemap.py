"""MAC_SLURM_NODE_MAP: one parser (contract.nodemap) behind the setting's kind, which
`mac env set` and every master process check, and behind the drain's and job
attribution's passes; a bad value is refused naming the setting, the file and the line."""

from __future__ import annotations

import os

import pytest

from contract import settings
from contract.nodemap import NodeMapError, check_node_map, parse_node_map


def test_pairs_and_a_file_give_the_same_map(tmp_path):
    path = tmp_path / "nodemap"
    path.write_text("# MAC host = Slurm NodeName\ngpu-01.dc = n001\n\ngpu-02.dc=n002  # rack 2\n")

    assert parse_node_map(" gpu-01.dc = n001 , gpu-02.dc=n002,") == {
        "gpu-01.dc": "n001",
        "gpu-02.dc": "n002",
    }
    assert parse_node_map(f"@{path}") == parse_node_map("gpu-01.dc=n001,gpu-02.dc=n002")
    assert parse_node_map("") == parse_node_map(None) == {}


def test_host_names_match_in_any_case_and_node_names_keep_theirs():
    """MAC stores host names lower-cased (they are case-insensitive); a map written with
    capitals never matched. Slurm's NodeName is kept as written."""
    assert parse_node_map("GPU-01.DC=N001") == {"gpu-01.dc": "N001"}
    with pytest.raises(NodeMapError, match="gpu-01 is given twice"):
        parse_node_map("gpu-01=n1,GPU-01=n2")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("gpu01:gpu-01", "MAC_SLURM_NODE_MAP='gpu01:gpu-01': 'gpu01:gpu-01' is not hostname"),
        ("gpu-01=n1,=n2", "MAC_SLURM_NODE_MAP='gpu-01=n1,=n2': '=n2' is not hostname"),
        ("gpu-01=n 1", "'gpu-01=n 1' is not hostname=NodeName"),
        ("gpu-01=n1=n2", "'gpu-01=n1=n2' is not hostname=NodeName"),
        ("gpu-01=n1,gpu-01=n2", "gpu-01 is given twice, as n1 and as n2"),
        ("@nodemap", "MAC_SLURM_NODE_MAP='@nodemap' is not an absolute path"),
        ("@", "is not an absolute path"),
    ],
)
def test_a_bad_value_is_refused_naming_the_setting(value, words):
    with pytest.raises(NodeMapError, match=r"^MAC_SLURM_NODE_MAP=") as refused:
        parse_node_map(value)
    assert words in str(refused.value)
    with pytest.raises(NodeMapError):
        check_node_map(value)


def test_a_bad_line_of_the_file_is_named_by_its_number(tmp_path):
    path = tmp_path / "nodemap"
    path.write_text("gpu-01=n001\n# gpu-02 next\ngpu02:n002\n")

    with pytest.raises(NodeMapError, match=rf"{path} line 3: 'gpu02:n002' is not hostname"):
        parse_node_map(f"@{path}")
    with pytest.raises(NodeMapError, match=rf"{path} line 3"):
        check_node_map(f"@{path}")


def test_a_file_that_cannot_be_read_is_refused_by_the_pass_naming_it(tmp_path):
    missing = tmp_path / "gone"
    with pytest.raises(NodeMapError) as refused:
        parse_node_map(f"@{missing}")
    assert str(refused.value).startswith(
        f"MAC_SLURM_NODE_MAP='@{missing}': cannot read {missing} (No such file or directory)"
    )
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(NodeMapError, match=f"{binary} is not text"):
        parse_node_map(f"@{binary}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_file_this_user_cannot_read_is_refused_by_the_pass(tmp_path):
    path = tmp_path / "nodemap"
    path.write_text("gpu-01=n001\n")
    path.chmod(0)
    with pytest.raises(NodeMapError, match="Permission denied"):
        parse_node_map(f"@{path}")


def test_the_setting_leaves_a_file_it_cannot_see_to_the_pass(tmp_path):
    # The master's containers mount little of the host: where the file is not, the
    # setting takes it as written (the pass says on /health if the worker cannot read it).
    value = f"@{tmp_path / 'on-the-host-only'}"
    assert check_node_map(value) == value
    assert settings.setting("MAC_SLURM_NODE_MAP").parse(value) == value


def test_the_setting_refuses_what_mac_env_set_and_the_master_would(tmp_path):
    path = tmp_path / "nodemap"
    path.write_text("gpu-01=n001\ngpu-02 n002\n")
    for value in ("gpu01:gpu-01", f"@{path}", "@relative/nodemap"):
        with pytest.raises(settings.SettingError, match=r"^MAC_SLURM_NODE_MAP="):
            settings.check("MAC_SLURM_NODE_MAP", value)
    path.write_text("gpu-01=n001\ngpu-02=n002\n")
    settings.check("MAC_SLURM_NODE_MAP", f"@{path}")
    assert settings.values({"MAC_SLURM_NODE_MAP": "a.dc=a"}.get)["MAC_SLURM_NODE_MAP"] == "a.dc=a"


def test_the_file_a_value_names_is_read_by_the_same_rule_as_the_setting():
    """mac-worker mounts this file (maccli.master.slurmaccess); a value the setting refuses
    names none."""
    from contract.nodemap import map_file

    assert str(map_file(" @/etc/slurm/nodemap ")) == "/etc/slurm/nodemap"
    assert map_file("@nodemap") is None and map_file("gpu-01=n1") is None and map_file(None) is None
