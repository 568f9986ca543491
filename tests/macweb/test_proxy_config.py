"""`manage.py proxy_config`: nginx's configuration carries each MAC_API_* limit, and nginx
accepts it (`nginx -t`, Debian's nginx). What nginx then does with slow clients,
oversized headers and forged addresses is tests/inventory/test_server_stack.py's."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from macweb.proxy import ProxyLimits, render_nginx_conf

LIMITS = ProxyLimits(
    request_timeout=2.5,
    keepalive=7,
    max_connections=300,
    max_connections_per_address=20,
    max_header_bytes=16384,
    max_body_bytes=100_000,
    register_rate="600/min",
)


def _nginx_accepts(tmp_path, text: str) -> subprocess.CompletedProcess:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.skip("Debian's nginx is not installed")
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", "stderr"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_it_renders_every_limit_as_its_nginx_directive(tmp_path):
    text = render_nginx_conf(
        LIMITS, listen="127.0.0.1:18080", upstream="127.0.0.1:18081", prefix=str(tmp_path)
    )

    for line in (
        "client_header_timeout 2500ms;",
        "client_body_timeout 2500ms;",
        "send_timeout 2500ms;",
        "keepalive_timeout 7s;",
        "large_client_header_buffers 1 16384;",
        "client_max_body_size 200000;",
        "limit_conn per_address 20;",
        "worker_connections 1624;",
        "listen 127.0.0.1:18080 backlog=511;",
        "server 127.0.0.1:18081;",
        "proxy_set_header X-Forwarded-For $remote_addr;",
        "proxy_set_header Upgrade $http_upgrade;",
        f"pid {tmp_path}/nginx.pid;",
        "daemon off;",
        'add_header Allow "GET, HEAD, POST, OPTIONS" always;',  # nginx's own 405 (TRACE)
    ):
        assert line in text, line
    assert "MAC_API_MAX_HEADER_BYTES" in text and "MAC_API_MAX_CONNECTIONS_PER_ADDRESS" in text
    assert "set_real_ip_from" not in text  # nobody is trusted unless MAC_TRUSTED_PROXIES says
    checked = _nginx_accepts(tmp_path, text)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(
    ("rate", "nginx_rate", "burst", "retry_after"),
    [("600/min", "600r/m", 599, 1), ("20/s", "20r/s", 19, 1), ("3/min", "3r/m", 2, 20),
     ("1000/hour", "17r/m", 999, 4), ("1/day", "1r/m", 0, 86400)],
)  # fmt: skip
def test_the_register_rate_becomes_a_limit_req_per_address(
    tmp_path, rate, nginx_rate, burst, retry_after
):
    limits = ProxyLimits(**{**LIMITS.__dict__, "register_rate": rate})
    text = render_nginx_conf(
        limits, listen="127.0.0.1:18080", upstream="127.0.0.1:18081", prefix=str(tmp_path)
    )

    for zone in ("register", "deregister"):
        assert f"zone={zone}:10m rate={nginx_rate};" in text
        assert f"location = /api/v1/{zone} {{" in text
        limit = f"limit_req zone={zone} burst={burst} nodelay;" if burst else f"zone={zone};"
        assert limit in text
    assert f"add_header Retry-After {retry_after} always;" in text
    assert f"the limit is {rate} (MAC_REGISTER_RATE)" in text
    # The agent endpoints' own locations keep every answer nginx gives elsewhere.
    assert text.count("error_page 502 504 =503 @api_down;") == 3
    assert _nginx_accepts(tmp_path, text).returncode == 0


def test_trusted_proxies_are_the_only_ones_whose_forwarded_for_is_read(tmp_path):
    nets = [ipaddress.ip_network("10.1.0.0/16"), ipaddress.ip_network("fd00::/8")]
    text = render_nginx_conf(
        LIMITS, listen="[::]:18080", upstream="127.0.0.1:18081", prefix=str(tmp_path),
        trusted_proxies=nets,
    )  # fmt: skip

    assert "set_real_ip_from 10.1.0.0/16;" in text and "set_real_ip_from fd00::/8;" in text
    assert "real_ip_header X-Forwarded-For;" in text and "real_ip_recursive on;" in text
    assert "listen [::]:18080 backlog=511;" in text
    assert _nginx_accepts(tmp_path, text).returncode == 0


def test_under_docker_it_looks_the_api_server_up_as_it_goes(tmp_path):
    text = render_nginx_conf(
        LIMITS, listen="0.0.0.0:28080", upstream="api-server:28080", prefix=str(tmp_path),
        resolver="127.0.0.11",
    )  # fmt: skip

    assert "resolver 127.0.0.11 valid=10s ipv6=off;" in text
    assert "set $mac_api http://api-server:28080;" in text
    assert "upstream mac_api" not in text
    assert _nginx_accepts(tmp_path, text).returncode == 0


def test_the_command_writes_the_file_from_the_settings(tmp_path, settings, capsys):
    settings.API_REQUEST_TIMEOUT = 4.0
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("192.0.2.0/24")]
    out = tmp_path / "proxy" / "nginx.conf"

    call_command(
        "proxy_config", "--out", str(out), "--listen", "0.0.0.0:28080",
        "--upstream", "127.0.0.1:28081",
    )  # fmt: skip

    text = out.read_text()
    assert "client_header_timeout 4000ms;" in text
    assert "set_real_ip_from 192.0.2.0/24;" in text
    assert (tmp_path / "proxy" / "tmp").is_dir()
    assert f"Wrote {out}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "value"),
    [("--listen", "28080"), ("--upstream", "api-server"), ("--listen", "host:99999")],
)
def test_the_command_refuses_an_address_that_is_not_host_port(tmp_path, option, value):
    args = {"--listen": "127.0.0.1:28080", "--upstream": "127.0.0.1:28081", option: value}

    with pytest.raises(CommandError, match=f"{option} '{value}' is not HOST:PORT"):
        call_command(
            "proxy_config", "--out", str(tmp_path / "nginx.conf"),
            "--listen", args["--listen"], "--upstream", args["--upstream"],
        )  # fmt: skip
