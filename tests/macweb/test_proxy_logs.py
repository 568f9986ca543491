"""What Debian's nginx, configured by `manage.py proxy_config`, writes to its error log
while the API server is down: the outage, and never a password-reset link's token."""

from __future__ import annotations

import http.client
import os

import pytest

from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.proxy import nginx_binary, start_proxy

pytestmark = pytest.mark.skipif(nginx_binary() is None, reason="Debian's nginx is missing")

TOKEN = "cb5w0g-9f1c2d3e4a5b6c7d8e9f0a1b2c3d4e5f"


def _get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_a_reset_link_followed_while_the_api_server_is_down_leaves_no_token(tmp_path):
    env = {**os.environ, "MAC_DATA_DIR": str(tmp_path / "data")}
    port = free_port()
    proxy = start_proxy(tmp_path, env, port, upstream_port=free_port())  # nothing listens
    try:
        reset = _get(port, f"/accounts/reset/Mg/{TOKEN}/")
        dashboard = _get(port, "/nodes/")
    finally:
        stop_process(proxy)

    assert reset == dashboard == 503
    log = (tmp_path / "proxy.log").read_text(errors="replace")
    # The outage is in the error log, from the other request...
    assert "connect() failed" in log and '"GET /nodes/ HTTP/1.1"' in log, log[-2000:]
    # ...and the reset link's request line, token and all, is not.
    assert "/accounts/reset/" not in log, log[-2000:]
    assert TOKEN not in log
