"""Several agent services in one process: one event loop, each on its own port.

Why: every Python interpreter with aiohttp, prometheus_client and the exporters'
modules loaded costs about 40 MB resident, so seven services as seven processes
took more than the whole agent should (issue 13). Under the process runtime `mac`
runs the Python services of a node as one ``python -m exporters bmc-agent=29102
sys-manager=29103 ...`` (maccli.agent.specs); under Docker each keeps its own
container, and a single service runs alone exactly as before (exporters.__main__).

One service failing never takes the others down:
- its port is taken: that service is left out and the error names it; the others serve;
- its module or builder raises (a broken library, bad settings): its port still answers,
  with ``mac_exporter_backend_available{backend="<service>"} 0`` and the reason on
  /metrics, and /health answers 503 with the error, so `mac status` and the master's
  probe report that one service as failing;
- its collectors hang or raise: exporters.runtime already gives them a deadline and
  their own threads, and exporters.server gives each service its own handler threads;
- its server cannot start: it is logged and left out; the others go on.
A crash of the whole interpreter (a segfault in a vendor library) still ends every
service at once; the supervisor restarts the process.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import socket
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import Metric

from exporters.runtime import BackendStatus, Exporter, Options
from exporters.server import (
    AsgiServer,
    PortInUseError,
    bind_socket,
    start_exporter,
    stop_event_on_signals,
)

log = logging.getLogger("exporters")

Builder = Callable[[Options], object]  # returns an Exporter or an ASGI app


class BuildFailedSource:
    """What a service that could not be built reports: its own backend, unavailable."""

    name = "build"
    inline = True

    def __init__(self, service: str, reason: str) -> None:
        self.service = service
        self.reason = reason

    def backends(self) -> list[BackendStatus]:
        return [BackendStatus(self.service, False, self.reason)]

    def collect(self) -> Iterable[Metric]:
        return ()


def failed_exporter(service: str, reason: str, options: Options) -> Exporter:
    """An exporter that keeps the service's port answering and says why it is not there."""
    source = BuildFailedSource(service, reason)
    return Exporter(
        service,
        [source],
        timeout=options.timeout,
        health_extra=lambda: {"status": "failed", "error": reason},
    )


def build_service(service: str, builder: Builder, options: Options) -> object:
    """The service's Exporter or ASGI app; a failed build becomes failed_exporter()."""
    try:
        return builder(options)
    except Exception as exc:  # any failure of one service must leave the others serving
        reason = f"cannot build {service}: {type(exc).__name__}: {exc}"
        log.exception("%s; its port reports it, the other services go on", reason)
        return failed_exporter(service, reason, options)


def module_builder(module: str) -> Builder:
    """A builder that imports its module when called, so an import error is the service's."""

    def build(options: Options) -> object:
        return importlib.import_module(module).build(options)

    return build


@dataclass
class Member:
    """One service of the bundle: its bound socket and what serves on it."""

    service: str
    sock: socket.socket
    built: object


def bind_members(
    wanted: list[tuple[str, int]], host: str
) -> tuple[list[tuple[str, socket.socket]], list[str]]:
    """Bind each service's port; (the bound ones, the errors of the others)."""
    bound, errors = [], []
    for service, port in wanted:
        try:
            bound.append((service, bind_socket(host, port)))
        except PortInUseError as exc:
            errors.append(f"{service}: {exc}")
    return bound, errors


async def _start(member: Member) -> object:
    if isinstance(member.built, Exporter):
        return await start_exporter(member.built, member.sock)
    server = AsgiServer(member.service, member.built, member.sock)
    await server.start()
    return server


async def serve_members(members: list[Member], stop: asyncio.Event | None = None) -> list[str]:
    """Serve every member on the running loop until ``stop`` (default: SIGTERM/SIGINT).

    Returns the services that could not start (each logged); the others served.
    """
    stop = stop or stop_event_on_signals()
    running, failed = [], []
    for member in members:
        try:
            running.append((member.service, await _start(member)))
        except BaseException as exc:  # uvicorn ends a failed start with SystemExit
            if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
                raise
            log.error("%s could not start: %r; the other services go on", member.service, exc)
            failed.append(member.service)
    await stop.wait()
    log.info("stopping %s", ", ".join(name for name, _ in running))
    for name, server in reversed(running):
        try:
            await server.cleanup()
        except Exception:  # one service's shutdown must not keep the others up
            log.exception("%s did not stop cleanly", name)
    return failed


def run_bundle(
    wanted: list[tuple[str, int]],
    host: str,
    options: Options,
    builders: dict[str, Builder],
) -> int:
    """Serve the services (name, port) from this process until SIGTERM/SIGINT.

    Exit status 0 after a stop signal; 1 when no service could be bound at all.
    """
    bound, errors = bind_members(wanted, host)
    for error in errors:
        print(f"Error: {error}", file=sys.stderr, flush=True)
    if not bound:
        return 1
    members = [
        Member(service, sock, build_service(service, builders[service], options))
        for service, sock in bound
    ]
    # Everything built so far lives for the whole process: keep the cyclic GC from
    # rescanning it on every collection (shorter pauses, steadier scrape latency).
    gc.collect()
    gc.freeze()
    log.info("serving %s in one process", ", ".join(m.service for m in members))
    try:
        asyncio.run(serve_members(members))
    finally:
        for member in members:
            if isinstance(member.built, Exporter):
                member.built.close()
    return 0
