"""MASTER_URL and MAC_MASTER_CA_SHA256 in the agent's configuration: the URL replaces
MASTER_IP and MAC_MASTER_PORT, a pin allows only https://, and bad values name the key."""

from __future__ import annotations

import pytest

from node.config import ConfigError, NodeConfig

PIN = "ab" * 32


def _cfg(**environ: str) -> NodeConfig:
    return NodeConfig.load(
        {"MAC_NODE_ENV_FILE": "/nonexistent", "MAC_USER_ENV_FILE": "/none", **environ}
    )


def test_master_url_gives_the_address_port_and_url():
    cfg = _cfg(MASTER_URL="https://master-1.example:28443/", MAC_MASTER_CA_SHA256=f"sha256:{PIN}")
    assert cfg.master_url == "https://master-1.example:28443"
    assert cfg.master_ip == "master-1.example"
    assert cfg.master_port == 28443
    assert cfg.master_ca_pin == PIN


def test_without_master_url_nothing_changes():
    cfg = _cfg(MASTER_IP="10.0.0.1", MAC_MASTER_PORT="28081")
    assert cfg.master_url == "http://10.0.0.1:28081"
    assert cfg.master_ca_pin == ""


def test_a_pin_never_falls_back_to_http():
    with pytest.raises(ConfigError, match="set MASTER_URL=https://<master>:28443"):
        _ = _cfg(MASTER_IP="10.0.0.1", MAC_MASTER_CA_SHA256=PIN).master_url
    with pytest.raises(ConfigError, match=r"MASTER_URL=http://10\.0\.0\.1:28080 is plain HTTP"):
        _ = _cfg(MASTER_URL="http://10.0.0.1:28080", MAC_MASTER_CA_SHA256=PIN).master_url


def test_bad_values_name_the_key():
    with pytest.raises(ConfigError, match="MAC_MASTER_CA_SHA256: 'xyz' is not a CA pin"):
        _ = _cfg(MAC_MASTER_CA_SHA256="xyz").master_ca_pin
    with pytest.raises(ConfigError, match="MASTER_URL='ftp://m:1' is not http"):
        _ = _cfg(MASTER_URL="ftp://m:1").master_url
