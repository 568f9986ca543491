"""HTTP serving for the exporters: aiohttp for the metric services, uvicorn for ASGI apps.

The listening socket is bound by the caller first, so "port already in use" is a
clear message before anything starts. SIGTERM and SIGINT stop the server cleanly
and the process exits 0, which is what ``mac stop`` and Docker expect.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
from collections.abc import Callable

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from exporters.runtime import Exporter

log = logging.getLogger("exporters")


class PortInUseError(Exception):
    """The address is taken; carries the message the command line prints."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, or PortInUseError naming the next step."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortInUseError(
            f"cannot listen on {host}:{port}: {exc.strerror}. Another process holds the port "
            f"(find it with: ss -ltnp 'sport = :{port}'); stop it or pass --port."
        ) from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


def make_app(exporter: Exporter) -> web.Application:
    """The aiohttp application of one exporter: /metrics, /health and its extra routes."""

    async def metrics(_request: web.Request) -> web.Response:
        # Collection blocks (files, subprocesses, NVML): keep the event loop free.
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(None, exporter.exposition, exporter.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(_request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(None, exporter.health)
        return web.json_response(body, dumps=lambda obj: json.dumps(obj, sort_keys=True))

    async def index(_request: web.Request) -> web.Response:
        return web.Response(
            text=f"MAC {exporter.service}: see /metrics and /health\n", content_type="text/plain"
        )

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_routes(exporter.routes)
    return app


async def _serve_aiohttp(exporter: Exporter, sock: socket.socket) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runner = web.AppRunner(make_app(exporter), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    host, port = sock.getsockname()[:2]
    log.info("%s listening on http://%s:%s/", exporter.service, host, port)
    await stop.wait()
    log.info("%s stopping", exporter.service)
    await runner.cleanup()


def serve_exporter(exporter: Exporter, sock: socket.socket) -> None:
    """Serve until SIGTERM/SIGINT, then release the exporter's resources."""
    try:
        asyncio.run(_serve_aiohttp(exporter, sock))
    finally:
        exporter.close()


def serve_asgi(app: Callable, sock: socket.socket) -> None:
    """Serve an ASGI app (mango-sdk-agent) with uvicorn on an already bound socket."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    sock.setblocking(True)
    # uvicorn shuts down gracefully, then re-raises the signal against the handlers it
    # found; with the default ones the process would die by SIGTERM instead of exiting 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    server.run(sockets=[sock])
