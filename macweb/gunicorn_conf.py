"""The one gunicorn + uvicorn configuration of the API server, in every runtime.

`gunicorn -c python:macweb.gunicorn_conf macweb.asgi:application --bind ... --workers N`
is how both the process runtime (`mac start master`) and the Compose master start
mac-api-server; the command line only adds the address and the worker count.

Why a file of its own (issue 11):

- **Client addresses.** gunicorn and uvicorn trust X-Forwarded-For from 127.0.0.1 by
  default and rewrite the client address before MAC sees it, so any local process
  could pose as any node. Here the servers never rewrite it: only MAC_TRUSTED_PROXIES,
  applied by inventory.addresses.source_address, decides.
- **Slow clients.** Neither server bounds the time a client takes to send its request.
  BoundedHttpToolsProtocol gives each request MAC_API_REQUEST_TIMEOUT seconds from its
  first byte (or from connect) to its last body byte, caps the header size, and
  closes connections beyond MAC_API_MAX_CONNECTIONS at once instead of letting them
  hold file descriptors. docs/security.md lists the limits.
"""

from __future__ import annotations

import resource

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn_worker import UvicornWorker

from macweb.envconf import env_float, env_int

REQUEST_TIMEOUT = env_float("MAC_API_REQUEST_TIMEOUT", 30.0, minimum=0.5)
KEEPALIVE = env_int("MAC_API_KEEPALIVE", 5, minimum=1, maximum=3600)
MAX_CONNECTIONS = env_int("MAC_API_MAX_CONNECTIONS", 1000, minimum=10)
MAX_HEADER_BYTES = env_int("MAC_API_MAX_HEADER_BYTES", 32 * 1024, minimum=1024)

# --- gunicorn's own settings (the command line may still override them).
worker_class = "macweb.gunicorn_conf.MacUvicornWorker"
# Seconds a silent worker may take before the arbiter restarts it, and a stopping one
# may take to finish its requests.
timeout = 30
graceful_timeout = 30
keepalive = KEEPALIVE
# Nothing in front of MAC is trusted by the server itself (the worker repeats it to
# uvicorn). gunicorn's own --limit-request-* do not apply: uvicorn parses the requests,
# and BoundedHttpToolsProtocol caps their size.
forwarded_allow_ips = ""


def _raise_file_limit() -> None:
    """Let every worker hold MAC_API_MAX_CONNECTIONS sockets plus its Redis/DB pools."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_CONNECTIONS + 512
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def on_starting(server) -> None:
    _raise_file_limit()


_REQUEST_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_HEADERS_TOO_LARGE_RESPONSE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; "
    b"charset=utf-8\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
)


def _canned(template: bytes, text: str) -> bytes:
    body = text.encode()
    return template % (len(body), body)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on reading each request.

    The deadline starts when the connection opens or a request's first byte arrives
    and ends when its body is complete; between requests uvicorn's keep-alive timeout
    applies. A client that misses it gets a 408 and the connection is closed (an
    application still waiting for the body sees a disconnect).
    """

    request_timeout = REQUEST_TIMEOUT
    max_connections = MAX_CONNECTIONS
    max_header_bytes = MAX_HEADER_BYTES

    _read_deadline = None
    _in_headers = False
    _header_bytes = 0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            # Over the cap: refuse at once rather than hold a descriptor for it.
            self.logger.warning(
                "Connection refused: %d open (MAC_API_MAX_CONNECTIONS)", self.max_connections
            )
            self.transport.abort()
            return
        self._start_reading_request()

    def connection_lost(self, exc) -> None:
        self._stop_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_headers and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._refuse(
                    _HEADERS_TOO_LARGE_RESPONSE,
                    f"Request headers exceed {self.max_header_bytes} bytes "
                    "(MAC_API_MAX_HEADER_BYTES).\n",
                )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_reading_request()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._stop_deadline()
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        # The WebSocket protocol takes the connection over with its own timeouts.
        self._stop_deadline()
        super().handle_websocket_upgrade()

    def _start_reading_request(self) -> None:
        self._in_headers = True
        self._header_bytes = 0
        if self._read_deadline is None:
            self._read_deadline = self.loop.call_later(self.request_timeout, self._timed_out)

    def _stop_deadline(self) -> None:
        self._in_headers = False
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _timed_out(self) -> None:
        self._read_deadline = None
        self._refuse(
            _REQUEST_TIMEOUT_RESPONSE,
            f"The request was not received within {self.request_timeout:g} s "
            "(MAC_API_REQUEST_TIMEOUT).\n",
        )

    def _refuse(self, template: bytes, text: str) -> None:
        self._stop_deadline()
        if self.transport.is_closing():
            return
        answering = self.cycle is not None and not self.cycle.response_complete
        if not (answering and self.cycle.response_started):
            self.transport.write(_canned(template, text))
        self.transport.close()


class MacUvicornWorker(UvicornWorker):
    """The uvicorn worker with MAC's protocol and no proxy-header rewriting."""

    CONFIG_KWARGS = {
        "loop": "auto",
        "http": BoundedHttpToolsProtocol,
        # Only MAC_TRUSTED_PROXIES decides whom to believe (inventory.addresses).
        "proxy_headers": False,
        "forwarded_allow_ips": "",
        "limit_concurrency": MAX_CONNECTIONS,
        "timeout_keep_alive": KEEPALIVE,
    }
