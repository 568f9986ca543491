"""The proxy's HTTPS (28443) beside HTTP, with Debian's nginx on the material prepare_tls
made: the chain verifies against the pinned CA, the CA is served to agents, and MAC_HTTP
turns plain HTTP off (loopback only) or into a redirect (but /health). By default plain
HTTP sends people's pages from other hosts to HTTPS, and the API learns the scheme the
client used, from nginx or a trusted proxy, never from the client itself."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from contract.pinning import CA_PATH, first_certificate, pinned_context, spki_sha256
from testkit.fakehttp import JsonHandler, serving
from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.proxy import nginx_binary, prepare_tls, start_proxy

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(nginx_binary() is None, reason="Debian's nginx is missing")


class Upstream(JsonHandler):
    """The API server's stand-in: says which path and scheme nginx passed on."""

    def do_GET(self):
        self.send_json(200, {"path": self.path, "proto": self.headers["X-Forwarded-Proto"]})


def _get(
    host: str, port: int, path: str, context=None, headers: dict | None = None
) -> http.client.HTTPResponse:
    if context is None:
        conn = http.client.HTTPConnection(host, port, timeout=5)
    else:
        conn = http.client.HTTPSConnection(host, port, timeout=5, context=context)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    response.body = response.read()
    conn.close()
    return response


@pytest.fixture
def master_env(tmp_path):
    return {**os.environ, "MAC_DATA_DIR": str(tmp_path / "data")}


def test_https_serves_the_chain_of_the_pinned_ca_beside_http(tmp_path, master_env):
    pin = prepare_tls(master_env)
    ca_pem = (tmp_path / "data" / "tls" / "ca.pem").read_bytes()
    http_port, tls_port = free_port(), free_port()
    with serving(Upstream) as upstream:
        proxy = start_proxy(tmp_path, master_env, http_port, urlsplit(upstream).port, tls_port)
        try:
            served_ca = _get("127.0.0.1", tls_port, CA_PATH, context=pinned_context(ca_pem))
            secure = _get("127.0.0.1", tls_port, "/api/v1/self", context=pinned_context(ca_pem))
            by_name = _get("localhost", tls_port, "/health", context=pinned_context(ca_pem))
            # A client's own word on its scheme is never believed (no trusted proxy here).
            plain = _get(
                "127.0.0.1", http_port, "/api/v1/self", headers={"X-Forwarded-Proto": "https"}
            )
        finally:
            stop_process(proxy)

    assert served_ca.status == 200
    assert served_ca.headers["Content-Type"] == "application/x-pem-file"
    assert spki_sha256(first_certificate(served_ca.body)) == pin
    assert secure.status == 200
    assert b'"proto": "https"' in secure.body and b'"/api/v1/self"' in secure.body
    assert by_name.status == 200
    assert plain.status == 200 and b'"proto": "http"' in plain.body


def _nginx(
    tmp_path: Path, env: dict, listen: str, tls_listen: str, upstream: int | None = None
) -> subprocess.Popen:
    conf = tmp_path / "proxy" / "nginx.conf"
    subprocess.run(
        [sys.executable, "-m", "django", "proxy_config", "--out", str(conf), "--listen", listen,
         "--upstream", f"127.0.0.1:{upstream or free_port()}", "--tls-listen", tls_listen],
        env=env, cwd=REPO, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    process = subprocess.Popen(
        [nginx_binary(), "-p", str(conf.parent), "-c", str(conf), "-e", "stderr"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    host, _, port = tls_listen.rpartition(":")
    for _ in range(200):
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return process
        except OSError:
            if process.poll() is not None:
                break
            subprocess.run(["sleep", "0.05"], check=False)
    stop_process(process)
    pytest.fail("nginx did not start")


def test_http_off_leaves_plain_http_on_loopback_only(tmp_path, master_env):
    master_env["MAC_HTTP"] = "off"
    prepare_tls(master_env, "127.0.0.2")
    http_port, tls_port = free_port(), free_port()
    # 127.0.0.2 plays the master's network address.
    proxy = _nginx(tmp_path, master_env, f"127.0.0.2:{http_port}", f"127.0.0.2:{tls_port}")
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", http_port), timeout=2)
        local = _get("127.0.0.1", http_port, "/health")
        ca = (tmp_path / "data" / "tls" / "ca.pem").read_bytes()
        served = _get("127.0.0.2", tls_port, CA_PATH, context=pinned_context(ca))
    finally:
        stop_process(proxy)
    assert local.status == 503  # nginx answers (its API server is down): the check still runs
    assert served.status == 200


def test_http_redirect_sends_everything_but_health_to_https(tmp_path, master_env):
    master_env["MAC_HTTP"] = "redirect"
    prepare_tls(master_env)
    http_port, tls_port = free_port(), free_port()
    proxy = _nginx(tmp_path, master_env, f"127.0.0.1:{http_port}", f"127.0.0.1:{tls_port}")
    try:
        moved = _get("127.0.0.1", http_port, "/api/v1/nodes?status=offline")
        health = _get("127.0.0.1", http_port, "/health")
        ca = (tmp_path / "data" / "tls" / "ca.pem").read_bytes()
        secure = _get("127.0.0.1", tls_port, "/api/v1/nodes", context=pinned_context(ca))
    finally:
        stop_process(proxy)
    assert moved.status == 301
    assert moved.headers["Location"] == (
        f"https://127.0.0.1:{tls_port}/api/v1/nodes?status=offline"
    )
    assert health.status == 503  # passed on to the API server (down here), not redirected
    assert secure.status == 503  # HTTPS itself never redirects


def test_people_pages_from_another_host_go_to_https_and_machines_stay(tmp_path, master_env):
    # nginx believes X-Forwarded-For from loopback here (MAC_TRUSTED_PROXIES), so a
    # request can come from another host's address (198.51.100.7) without leaving it.
    master_env["MAC_TRUSTED_PROXIES"] = "127.0.0.0/8"
    master_env["MAC_TLS_PORT"] = "28999"  # where other hosts reach HTTPS (Docker's published)
    prepare_tls(master_env)
    http_port, tls_port = free_port(), free_port()
    other = {"X-Forwarded-For": "198.51.100.7"}
    with serving(Upstream) as upstream:
        proxy = _nginx(
            tmp_path, master_env, f"127.0.0.1:{http_port}", f"127.0.0.1:{tls_port}",
            upstream=urlsplit(upstream).port,
        )  # fmt: skip
        try:
            pages = {
                path: _get("127.0.0.1", http_port, path, headers=other)
                for path in ("/", "/accounts/login/?next=/nodes/", "/admin/", "/nodes/3/")
            }
            machines = {
                path: _get("127.0.0.1", http_port, path, headers=other)
                for path in ("/health", "/metrics", "/api/v1/register", "/ws/live/",
                             "/static/mac.css", "/prometheus/api/v1/query")
            }  # fmt: skip
            local = _get("127.0.0.1", http_port, "/accounts/login/")
            ended_tls = _get(
                "127.0.0.1", http_port, "/accounts/login/",
                headers={**other, "X-Forwarded-Proto": "https"},
            )  # fmt: skip
        finally:
            stop_process(proxy)

    for path, answer in pages.items():
        assert answer.status == 301, path
        assert answer.headers["Location"] == f"https://127.0.0.1:28999{path}"
    for path, answer in machines.items():
        assert answer.status != 301, path
    assert machines["/health"].status == 200 and b'"proto": "http"' in machines["/health"].body
    assert local.status == 200  # the master's own loopback keeps its pages on HTTP
    # A trusted proxy that ended TLS itself: the page is served, and Django hears https.
    assert ended_tls.status == 200 and b'"proto": "https"' in ended_tls.body


def test_http_off_without_https_is_refused_by_name(tmp_path, master_env):
    master_env["MAC_HTTP"] = "off"
    done = subprocess.run(
        [sys.executable, "-m", "django", "proxy_config", "--out", str(tmp_path / "n.conf"),
         "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2"],
        env=master_env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "MAC_HTTP=off needs HTTPS: give --tls-listen HOST:PORT." in done.stderr
    assert "Traceback" not in done.stderr
