"""Real HTTP servers on loopback for the tests that play a master or a BMC, and a port
that does not speak HTTP at all (NotHttp)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet request handler that answers JSON."""

    def send_json(self, status: int, payload: object) -> None:
        """Answer `payload` (bytes as they are, anything else JSON-encoded) with `status`."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_json(self) -> object:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def log_message(self, *args):
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on a free loopback port; yields the base URL, shuts down on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class NotHttp:
    """A loopback port that answers every connection with a TLS alert, as an https port
    asked with http:// does: no HTTP status line at all (a context manager; `url`)."""

    ANSWER = b"\x15\x03\x01\x00\x02\x02\x46"

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, name="not-http", daemon=True)

    def __enter__(self) -> NotHttp:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            with connection:
                connection.recv(4096)
                connection.sendall(self.ANSWER)
