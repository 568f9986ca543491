"""HTTP serving for the exporters: aiohttp for the metric services, uvicorn for ASGI apps.

The listening socket is bound by the caller first, so "port already in use" is a
clear message before anything starts. SIGTERM and SIGINT stop the server cleanly
and the process exits 0, which is what ``mac stop`` and Docker expect.

``start_exporter`` and ``AsgiServer`` start a service on the running event loop and
hand back something to stop it with, so that one loop can serve several services
(exporters.bundle); ``serve_exporter`` and ``serve_asgi`` serve one service alone.
Each service's blocking work (collection, /health) runs in a thread pool of its own:
a service whose backend hangs fills its own pool, never the one the others use.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
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
    """host:port cannot be bound (taken, not this host's, not allowed); carries the
    message the command line prints."""


def bind_error_words(host: str, port: int, exc: OSError) -> str:
    """Why host:port cannot be bound and what to do: each cause its own next step."""
    said = f"cannot listen on {host}:{port}: {exc.strerror or exc}."
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{said} Another process holds the port "
            f"(find it with: ss -ltnp 'sport = :{port}'); stop it or pass --port."
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        # At boot, MAC_BIND's interface may simply not be up yet.
        return (
            f"{said} {host} is not an address of this host (yet): check MAC_BIND (--bind) "
            "against `ip -br addr`, bring its interface up, or bind 0.0.0.0."
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        if port < 1024:
            return (
                f"{said} Ports below 1024 need root or CAP_NET_BIND_SERVICE: "
                "pass a --port of 1024 or more, or run the service as root."
            )
        return f"{said} A security policy (SELinux, AppArmor) refuses it; see the audit log."
    return f"{said} Check --bind (MAC_BIND) and --port."


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, or PortInUseError naming the next step."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortInUseError(bind_error_words(host, port, exc)) from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


# Threads per service for its blocking handlers: a scrape and a /health at once, with
# room for a probe that arrives while a hung collector holds one for its deadline.
HANDLER_THREADS = 4


def make_app(exporter: Exporter) -> web.Application:
    """The aiohttp application of one exporter: /metrics, /health and its extra routes."""
    pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=HANDLER_THREADS, thread_name_prefix=f"{exporter.service}-http"
    )

    async def metrics(request: web.Request) -> web.Response:
        # Collection blocks (files, subprocesses, NVML): keep the event loop free.
        loop = asyncio.get_running_loop()
        names = request.query.getall("name[]", [])  # client_python's filter
        body = await loop.run_in_executor(pool, exporter.page, names)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(_request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(pool, exporter.health)
        # "failed": the service could not be built (exporters.bundle); its port still
        # answers, with a status that every probe reads as failing.
        status = 503 if body.get("status") == "failed" else 200
        return web.json_response(
            body, status=status, dumps=lambda obj: json.dumps(obj, sort_keys=True)
        )

    async def index(_request: web.Request) -> web.Response:
        return web.Response(
            text=f"MAC {exporter.service}: see /metrics and /health\n", content_type="text/plain"
        )

    async def release_pool(_app: web.Application) -> None:
        pool.shutdown(wait=False, cancel_futures=True)  # a hung handler is not waited for

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_routes(exporter.routes)
    app.on_cleanup.append(release_pool)
    return app


async def start_exporter(exporter: Exporter, sock: socket.socket) -> web.AppRunner:
    """Serve the exporter on sock from the running loop; ``await runner.cleanup()`` stops it."""
    runner = web.AppRunner(make_app(exporter), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    host, port = sock.getsockname()[:2]
    log.info("%s listening on http://%s:%s/", exporter.service, host, port)
    return runner


def stop_event_on_signals() -> asyncio.Event:
    """An event that SIGTERM and SIGINT set (call from the loop's thread)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def _serve_aiohttp(exporter: Exporter, sock: socket.socket) -> None:
    stop = stop_event_on_signals()
    runner = await start_exporter(exporter, sock)
    await stop.wait()
    log.info("%s stopping", exporter.service)
    await runner.cleanup()


def serve_exporter(exporter: Exporter, sock: socket.socket) -> None:
    """Serve until SIGTERM/SIGINT, then release the exporter's resources."""
    try:
        asyncio.run(_serve_aiohttp(exporter, sock))
    finally:
        exporter.close()


class AsgiServer:
    """An ASGI app (mango-sdk-agent) served by uvicorn on a loop that serves others too.

    uvicorn's ``serve`` captures SIGTERM/SIGINT while it runs and hands them back when
    it ends. The bundle installed its own handlers on the loop first
    (``stop_event_on_signals``), and the loop still hears every signal through its
    wakeup descriptor, so one SIGTERM stops uvicorn and sets the bundle's stop event:
    every service stops and the process exits 0 (tests/exporters/test_bundle.py).
    """

    def __init__(self, name: str, app: Callable, sock: socket.socket) -> None:
        import uvicorn

        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.name = name
        self.sock = sock
        self.server = uvicorn.Server(config)
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        """Start serving; raises what the server raised if it ends before it is up."""
        self.task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started:
            if self.task.done():
                self.task.result()  # raises the server's failure
                raise RuntimeError(f"{self.name}: the ASGI server ended before it started")
            await asyncio.sleep(0.02)
        host, port = self.sock.getsockname()[:2]
        log.info("%s listening on http://%s:%s/", self.name, host, port)

    async def cleanup(self) -> None:
        if self.task is None:
            return
        self.server.should_exit = True
        await self.task


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
