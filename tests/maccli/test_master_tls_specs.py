"""The master's services as `mac start master` prepares them for TLS: the proxy's
prestart makes or checks the material before its nginx.conf gets HTTPS, Prometheus
trusts the CA, and MAC_HTTP (and the drain's settings) are checked before anything
starts."""

from __future__ import annotations

import pytest

from maccli.master.specs import master_specs
from node.config import ConfigError, NodeConfig


def _specs(tmp_path, **extra: str) -> dict:
    environ = {
        "MAC_NODE_ENV_FILE": str(tmp_path / "node.env"),
        "MAC_USER_ENV_FILE": str(tmp_path / "user.env"),
        "MAC_DATA_DIR": str(tmp_path / "data"),
        "MAC_MASTER_BIND": "10.20.0.5",
        "MAC_TLS_PORT": "18443",
        **extra,
    }
    return {spec.name: spec for spec in master_specs(NodeConfig.load(environ=environ))}


def test_the_proxy_prepares_tls_then_serves_https_and_prometheus_trusts_its_ca(tmp_path):
    specs = _specs(tmp_path)

    prepare, config = specs["proxy"].prestart
    assert prepare[1:4] == ["-m", "django", "prepare_tls"]
    assert prepare[4:6] == ["--name", "10.20.0.5"]  # the address agents are told
    assert config[config.index("--tls-listen") + 1] == "10.20.0.5:18443"
    (prometheus,) = specs["prometheus"].prestart
    assert prometheus[prometheus.index("--master") + 1] == "10.20.0.5:18443"
    ca = prometheus[prometheus.index("--ca-file") + 1]
    assert ca == str((tmp_path / "data" / "tls" / "ca.pem").resolve())
    assert specs["proxy"].host == "10.20.0.5"


def test_http_off_checks_the_proxy_on_loopback(tmp_path):
    assert _specs(tmp_path, MAC_HTTP="off")["proxy"].host == "127.0.0.1"


def test_a_bad_mac_http_stops_the_start_naming_it(mac_env):
    mac_env.env["MAC_HTTP"] = "sometimes"
    done = mac_env.run("start", "master")
    assert done.returncode == 1
    assert "Error: MAC_HTTP='sometimes': use on, off or redirect" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_drain_setting_stops_the_master_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"MAC_DRAIN_BUDGET='lots': give a share"):
        _specs(tmp_path, MAC_SLURM_DRAIN="on", MAC_DRAIN_BUDGET="lots")
