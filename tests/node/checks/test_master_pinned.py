"""The doctor's `master_pinned` check: an agent without the master's CA pin is warned, with
the commands that pin it; a pinned one passes; a pin with a plain-HTTP URL fails."""

from __future__ import annotations

from node.checks import CheckStatus
from node.checks.master import check_master_pinned
from tests.node.checks.test_config_master import _ctx

PIN = "5a071d02233879aed57fe7baca2b1cd23733e46248cc232eddb3f4505cc06ee2"


def test_no_pin_warns_that_secrets_go_in_clear_and_prints_the_join_commands(tmp_path):
    result = check_master_pinned(_ctx(tmp_path, {"MASTER_IP": "10.0.0.5"}))
    assert result.status == CheckStatus.WARN
    assert "MAC_MASTER_CA_SHA256 is not set" in result.detail
    assert "go to http://10.0.0.5:28080 in clear." in result.detail
    assert "sudo mac env set --node MASTER_URL=https://<master>:28443" in result.fix
    assert "sudo mac env set --node MAC_MASTER_CA_SHA256=<the pin it printed>" in result.fix


def test_a_pinned_master_passes_and_a_pin_without_https_fails(tmp_path):
    pinned = check_master_pinned(
        _ctx(tmp_path, {"MASTER_URL": "https://10.0.0.5:28443", "MAC_MASTER_CA_SHA256": PIN})
    )
    assert pinned.status == CheckStatus.PASS
    assert pinned.detail == (
        "https://10.0.0.5:28443, trusted only with the CA sha256:5a071d02233879ae..."
    )

    plain = check_master_pinned(
        _ctx(tmp_path, {"MASTER_IP": "10.0.0.5", "MAC_MASTER_CA_SHA256": PIN})
    )
    assert plain.status == CheckStatus.FAIL
    assert "set MASTER_URL=https://<master>:28443" in plain.detail


def test_nothing_to_check_without_a_master(tmp_path):
    assert check_master_pinned(_ctx(tmp_path)).status == CheckStatus.SKIP
