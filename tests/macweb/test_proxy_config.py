"""`manage.py proxy_config`: nginx's configuration carries each MAC_API_* limit, and nginx
accepts it (`nginx -t`, Debian's nginx). What nginx then does with slow clients,
oversized headers and forged addresses is tests/inventory/test_server_stack.py's."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from macweb.monitoring_gate import normalise
from macweb.nginxconf import PROMETHEUS_PAGES, ProxyLimits, render_nginx_conf
from testkit.fakehttp import JsonHandler, serving
from testkit.metrics_writes import spelled_writes
from testkit.ports import free_port
from testkit.waiting import wait_for

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


def _call(url: str, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


class _GateAndServer(JsonHandler):
    """Plays the API server's gate (which says yes unless the client says `no`) and a
    monitoring server (which echoes the path it got); every request is recorded."""

    seen: list[dict] = []

    def _answer(self) -> None:
        self.seen.append(
            {"method": self.command, "path": self.path, **{k: v for k, v in self.headers.items()}}
        )
        if self.path == "/auth/monitoring":
            refused = self.headers.get("X-Client") == "no"
            self.send_response(403 if refused else 204)
            if refused:
                self.send_header("X-Mac-Gate", "refused for the test")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/redirect"):
            # As Prometheus answers /graph (a path without the prefix) and / (its
            # external URL, on the host MAC_PUBLIC_URL names).
            to = "/graph/" if self.path == "/redirect" else "http://elsewhere:1/prometheus/x"
            self.send_response(301)
            self.send_header("Location", to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_json(200, {"path": self.path, "method": self.command})

    do_GET = do_POST = do_DELETE = _answer


@contextmanager
def _front_door(tmp_path: Path, resolver: str = "", classic_ui: bool = True) -> Iterator[str]:
    """Real nginx with _GateAndServer as the API (the gate) and both monitoring servers."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.skip("Debian's nginx is not installed")
    _GateAndServer.seen = []
    with serving(_GateAndServer) as url:
        backend = url.removeprefix("http://")
        port = free_port()
        text = render_nginx_conf(
            LIMITS, listen=f"127.0.0.1:{port}", upstream=backend, prefix=str(tmp_path),
            resolver=resolver, monitoring={"prometheus": backend, "alertmanager": backend},
            classic_ui=classic_ui,
        )  # fmt: skip
        (tmp_path / "tmp").mkdir(exist_ok=True)
        (tmp_path / "nginx.conf").write_text(text)
        proc = subprocess.Popen(
            [nginx, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-e", "stderr"],
            stderr=subprocess.PIPE,
        )
        try:
            door = f"http://127.0.0.1:{port}"
            wait_for(lambda: _call(f"{door}/prometheus/-/ready")[0] == 200, timeout=20)
            _GateAndServer.seen = []
            yield door
        finally:
            proc.terminate()
            proc.wait(10)


@pytest.mark.parametrize("resolver", ["", "127.0.0.11"])
def test_monitoring_servers_pass_only_what_the_gate_allows(tmp_path, resolver):
    """Through the real nginx: the gate sees the normalised path with its prefix and the
    client's method; the server gets the path without the prefix, with its query; a
    refusal is a 403 with the gate's reason. Both ways of naming the upstreams."""
    with _front_door(tmp_path, resolver) as door:
        answer = json.loads(_call(f"{door}/prometheus/api/v1/query?query=up")[1])
        deleted, _ = _call(f"{door}/alertmanager/api/v2/silence/x%2Fy", method="DELETE")
        refused = urllib.request.Request(
            f"{door}/prometheus/api/%2E%2E/-/quit", method="POST", data=b"",
            headers={"X-Client": "no"},
        )  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(refused, timeout=5)

    assert answer == {"path": "/api/v1/query?query=up", "method": "GET"}
    assert deleted == 200
    assert error.value.code == 403
    assert error.value.read() == b"refused for the test\n"
    gate = [r for r in _GateAndServer.seen if r["path"] == "/auth/monitoring"]
    assert [(r["X-Original-Method"], r["X-Original-URI"]) for r in gate] == [
        ("GET", "/prometheus/api/v1/query"),
        ("DELETE", "/alertmanager/api/v2/silence/x/y"),
        ("POST", "/prometheus/-/quit"),  # as nginx normalised it
    ]
    passed = [r for r in _GateAndServer.seen if r["path"] != "/auth/monitoring"]
    assert [r["path"] for r in passed] == ["/api/v1/query?query=up", "/api/v2/silence/x/y"]
    assert all("Authorization" not in r and "Cookie" not in r for r in passed)


def test_the_server_reads_the_very_path_the_gate_decided_on(tmp_path):
    """Every spelling of the store's writes (testkit.metrics_writes), by real nginx: the
    path the server gets, decoded once as a server does, is the gate's path normalised
    (macweb.monitoring_gate.normalise) without the prefix. So a gate that refuses the
    normalised path refuses what the server would have read."""
    writes = spelled_writes()
    with _front_door(tmp_path) as door:
        for _name, _attempt, uri in writes:
            _GateAndServer.seen = []
            status, _ = _call(door + uri)
            gate = [r for r in _GateAndServer.seen if r["path"] == "/auth/monitoring"]
            passed = [r for r in _GateAndServer.seen if r["path"] != "/auth/monitoring"]
            assert status == 200 and len(gate) == len(passed) == 1, uri
            decided = normalise(gate[0]["X-Original-URI"])
            served = urllib.parse.unquote(passed[0]["path"].partition("?")[0])
            if decided is None:  # refused whatever it means: an escape left over
                assert "%" in gate[0]["X-Original-URI"], uri
                continue
            assert decided == "/prometheus" + served, uri


@pytest.mark.parametrize("tail", ["%0D%0AX-Injected:%20yes", "%0Ax", "%09", "%7F"])
def test_a_control_character_in_the_path_reaches_neither_the_gate_nor_the_server(tmp_path, tail):
    """%0D%0A would end the gate's X-Original-URI header early (a header of the caller's
    own after it) and escape the prefix's rewrite: the server would read the raw path."""
    with _front_door(tmp_path) as door:
        _GateAndServer.seen = []
        status, body = _call(f"{door}/prometheus/api/v1/query{tail}")
        assert status == 400 and b"control character" in body
        assert _GateAndServer.seen == []
        assert _call(f"{door}/prometheus/api/v1/query%20x")[0] == 200  # a plain escape passes


def test_peoples_pages_lead_to_prometheuss_classic_ui_and_the_dashboards_alerts(tmp_path):
    with _front_door(tmp_path) as door:
        for page, classic in PROMETHEUS_PAGES.items():
            answer = _no_redirect(f"{door}/prometheus/{page}?g0.expr=up")
            assert answer.status == 302, page
            assert answer.headers["Location"] == f"/prometheus/{classic}?g0.expr=up"
        browser = _no_redirect(f"{door}/alertmanager/", Accept="text/html,*/*")
        assert (browser.status, browser.headers["Location"]) == (302, "/alerts/")
        amtool = _no_redirect(f"{door}/alertmanager/")
        assert amtool.status == 404 and b"/alertmanager/api/v2/" in amtool.read()
        # A server's own redirects stay under its prefix, on this host.
        moved = _no_redirect(f"{door}/prometheus/redirect")
        assert moved.headers["Location"] == "/prometheus/graph/"
        external = _no_redirect(f"{door}/prometheus/redirect-external")
        assert external.headers["Location"] == "/prometheus/x"
    assert not [r for r in _GateAndServer.seen if r["path"] == "/graph"]


def test_the_targets_view_serves_its_own_pages(tmp_path):
    with _front_door(tmp_path, classic_ui=False) as door:
        status, body = _call(f"{door}/prometheus/targets")
    assert status == 200 and json.loads(body)["path"] == "/targets"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _no_redirect(url: str, **headers: str):
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        return opener.open(urllib.request.Request(url, headers=headers), timeout=5)
    except urllib.error.HTTPError as exc:
        return exc
