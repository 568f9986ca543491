"""A live-socket handshake that hangs: the page says so and retries, instead of staying stale.

Real Chromium, the real server (uvicorn) behind a small TCP proxy that passes HTTP
through but, while told to, accepts WebSocket upgrades and never answers them: what a
stuck reverse proxy or an overloaded master looks like to the page.
"""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from testkit.browser import log_in
from testkit.ports import free_port
from tests.macweb.dashboard.test_browser import (  # noqa: F401 - fixtures used by name
    CHROMIUM,
    Server,
    asgi_server,
    browser,
    operator,
    page,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

HANDSHAKE_TIMEOUT_S = 10  # live.js HANDSHAKE_TIMEOUT_MS


class HangingUpgradeProxy:
    """127.0.0.1:<port> -> the server; WebSocket upgrades hang while `hang` is set."""

    def __init__(self, backend_port: int) -> None:
        self.backend_port = backend_port
        self.hang = threading.Event()
        self.held: list[socket.socket] = []
        self.upgrades_held = 0
        self.listener = socket.create_server(("127.0.0.1", free_port()))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                client.close()
                return
            head += chunk
        if b"upgrade: websocket" in head.lower() and self.hang.is_set():
            self.held.append(client)  # accepted, read, never answered
            self.upgrades_held += 1
            return
        backend = socket.create_connection(("127.0.0.1", self.backend_port))
        backend.sendall(head)
        threading.Thread(target=_pipe, args=(backend, client), daemon=True).start()
        _pipe(client, backend)

    def close(self) -> None:
        self.listener.close()
        for sock in self.held:
            sock.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxy(asgi_server):  # noqa: F811 - the fixture imported above
    proxy = HangingUpgradeProxy(asgi_server.port)
    yield proxy
    proxy.close()


def test_a_hanging_handshake_shows_no_answer_and_reconnects(page, proxy, operator):  # noqa: F811
    from playwright.sync_api import expect

    via = f"http://127.0.0.1:{proxy.port}"
    log_in(page, via)
    expect(page.locator("#live")).to_have_attribute("data-state", "live")

    proxy.hang.set()
    page.reload()
    live = page.locator("#live")
    expect(live).to_have_attribute("data-state", "connecting")
    expect(live).to_have_attribute("data-state", "down", timeout=(HANDSHAKE_TIMEOUT_S + 5) * 1000)
    expect(live.locator(".live-text")).to_contain_text("no answer from the server")
    assert proxy.upgrades_held >= 1

    proxy.hang.clear()  # the server answers again: the backoff's next attempt gets through
    expect(live).to_have_attribute(
        "data-state", "live", timeout=(2 * HANDSHAKE_TIMEOUT_S + 10) * 1000
    )
