"""The fleet itself: fake agents on loopback addresses, each port switchable at run time."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, generate_latest

from contract.liveness import loop_factory, raise_nofile_limit
from contract.services import BY_NAME, NIC_EXPORTER, SYS_EXPORTER, Service

DEFAULT_BASE = "127.20.0.0"
DEFAULT_SERVICES = (SYS_EXPORTER.name, NIC_EXPORTER.name)
MAX_REQUEST = 16 * 1024  # a request head larger than this is answered 431 and dropped


_block_counter = iter(range(1, 10_000))


def loopback_base() -> str:
    """A fresh 127.A.B.0 block for one fleet: A from our pid, B from a counter.

    Every test run gets its own block, so parallel runs never collide on 29101.
    """
    return f"127.{100 + os.getpid() % 150}.{next(_block_counter) % 250}.0"


class Mode(StrEnum):
    ANSWER = "answer"
    REFUSE = "refuse"
    HANG = "hang"
    BLACKHOLE = "blackhole"
    BAD_BODY = "bad_body"
    HTTP_500 = "http_500"


def node_addresses(count: int, base: str = DEFAULT_BASE) -> list[str]:
    """`count` loopback addresses after `base`, skipping .0 and .255 host bytes."""
    start = ipaddress.IPv4Address(base)
    if not start.is_loopback:
        raise ValueError(f"--base {base} is not a loopback address (127.0.0.0/8)")
    addresses: list[str] = []
    current = int(start)
    while len(addresses) < count:
        current += 1
        address = ipaddress.IPv4Address(current)
        if not address.is_loopback:
            raise ValueError(f"{count} nodes do not fit in 127.0.0.0/8 after {base}")
        if address.packed[-1] in (0, 255):
            continue
        addresses.append(str(address))
    return addresses


def hostname_for(ip: str) -> str:
    return "sim-" + ip.replace(".", "-").replace(":", "-")


def render_exposition(hostname: str) -> bytes:
    """A small, valid sys-exporter page in node_exporter's names."""
    registry = CollectorRegistry()
    Gauge("node_load1", "1m load average.", registry=registry).set(0.25)
    Gauge("node_memory_MemAvailable_bytes", "Memory available.", registry=registry).set(2**34)
    Counter(
        "node_cpu_seconds",
        "Seconds the CPUs spent in each mode.",
        ["cpu", "mode"],
        registry=registry,
    ).labels("0", "idle").inc(1234.5)
    Info("node_uname", "Labeled system information.", registry=registry).info(
        {"nodename": hostname, "sysname": "Linux", "machine": "x86_64"}
    )
    return generate_latest(registry)


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


@dataclass(eq=False)
class Port:
    """One service of one fake node: its listener and what it does now."""

    ip: str
    service: Service
    answer: bytes
    mode: Mode = Mode.ANSWER
    server: asyncio.base_events.Server | None = None
    blackhole: list[socket.socket] = field(default_factory=list)
    hung: set[asyncio.Transport] = field(default_factory=set)
    requests: int = 0

    def reply(self, path: bytes) -> bytes | None:
        """The bytes to send for a request of `path` in the current mode; None = hang."""
        self.requests += 1
        if self.mode is Mode.HANG:
            return None
        if self.mode is Mode.HTTP_500:
            return _response("500 Internal Server Error", "text/plain", b"exporter failed\n")
        if path.split(b"?", 1)[0] != self.service.liveness_path.encode():
            return _response("404 Not Found", "text/plain", b"not found\n")
        if self.mode is Mode.BAD_BODY:
            return _response("200 OK", "text/html", b"<html><body>login</body></html>\n")
        return self.answer


class _Responder(asyncio.Protocol):
    """Reads one request head, answers per the port's mode, closes."""

    def __init__(self, port: Port) -> None:
        self.port = port
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.transport is None or self.transport in self.port.hung:
            return
        self.buffer += data
        if b"\r\n\r\n" not in self.buffer:
            if len(self.buffer) > MAX_REQUEST:
                self.transport.write(
                    _response("431 Request Header Fields Too Large", "text/plain", b"")
                )
                self.transport.close()
            return
        parts = self.buffer.split(b" ", 2)
        path = parts[1] if len(parts) > 2 else b"/"
        reply = self.port.reply(path)
        if reply is None:
            self.port.hung.add(self.transport)
            return
        self.transport.write(reply)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.port.hung.discard(self.transport)


def _body_for(service: Service, hostname: str, exposition: bytes) -> bytes:
    if service.liveness_path == "/metrics":
        return _response("200 OK", "text/plain; version=0.0.4; charset=utf-8", exposition)
    if service.liveness_path == "/docs":
        return _response("200 OK", "text/html", b"<html><title>docs</title></html>\n")
    body = json.dumps({"status": "ok", "service": service.name, "node": hostname}).encode()
    return _response("200 OK", "application/json", body)


@dataclass(eq=False)
class SimNode:
    index: int
    ip: str
    hostname: str
    ports: dict[str, Port]

    def exporters(self) -> dict[str, int]:
        """What this node would report at registration ({service: port})."""
        return {name: port.service.port for name, port in self.ports.items()}


class SimFleet:
    """The fleet inside one running event loop."""

    def __init__(
        self,
        count: int = 0,
        *,
        base: str = DEFAULT_BASE,
        ips: Sequence[str] | None = None,
        services: Iterable[str] = DEFAULT_SERVICES,
    ) -> None:
        names = list(services)
        unknown = [name for name in names if name not in BY_NAME]
        if unknown:
            raise ValueError(f"unknown service {unknown[0]!r}; known: {', '.join(sorted(BY_NAME))}")
        addresses = list(ips) if ips else node_addresses(count, base)
        self.nodes: list[SimNode] = []
        for index, ip in enumerate(addresses):
            hostname = hostname_for(ip)
            exposition = render_exposition(hostname)
            ports = {
                name: Port(ip, BY_NAME[name], _body_for(BY_NAME[name], hostname, exposition))
                for name in names
            }
            self.nodes.append(SimNode(index, ip, hostname, ports))
        self.by_ip = {node.ip: node for node in self.nodes}

    async def start(self) -> None:
        raise_nofile_limit()
        for node in self.nodes:
            for port in node.ports.values():
                await self._apply(port, port.mode)

    async def stop(self) -> None:
        for node in self.nodes:
            for port in node.ports.values():
                await self._close(port)

    def node(self, which: int | str) -> SimNode:
        return self.nodes[which] if isinstance(which, int) else self.by_ip[which]

    async def set_mode(self, which: int | str, service: str, mode: Mode | str) -> None:
        port = self.node(which).ports[service]
        await self._apply(port, Mode(mode))

    async def set_node_mode(self, which: int | str, mode: Mode | str) -> None:
        """Every port of one node at once (e.g. REFUSE = the agent was killed)."""
        for service in self.node(which).ports:
            await self.set_mode(which, service, mode)

    async def _close(self, port: Port) -> None:
        if port.server is not None:
            port.server.close()
            port.server = None
        for sock in port.blackhole:
            sock.close()
        port.blackhole.clear()
        for transport in list(port.hung):
            transport.abort()
        port.hung.clear()

    async def _apply(self, port: Port, mode: Mode) -> None:
        listening = port.server is not None
        port.mode = mode
        if mode in (Mode.ANSWER, Mode.HANG, Mode.BAD_BODY, Mode.HTTP_500):
            if not listening:
                await self._close(port)
                loop = asyncio.get_running_loop()
                port.server = await loop.create_server(
                    lambda: _Responder(port),
                    host=port.ip,
                    port=port.service.port,
                    reuse_address=True,
                    backlog=128,
                )
            if mode is not Mode.HANG:
                for transport in list(port.hung):
                    transport.abort()
                port.hung.clear()
            return
        await self._close(port)
        if mode is Mode.BLACKHOLE:
            port.blackhole = _blackhole(port.ip, port.service.port)


def _blackhole(ip: str, port: int) -> list[socket.socket]:
    """A listener whose accept queue is full, so the kernel drops new SYNs."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((ip, port))
    listener.listen(0)
    sockets = [listener]
    # Backlog 0 still admits one connection; fill it and never accept it.
    filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    filler.setblocking(False)
    filler.connect_ex((ip, port))
    sockets.append(filler)
    return sockets


class FleetThread:
    """A SimFleet on its own event loop thread, driven by synchronous calls.

    Tests and the benchmark run the master's (synchronous) sweep in the main
    thread while the fleet answers from this one.
    """

    def __init__(self, *args, **kwargs) -> None:
        self.loop = loop_factory()()
        self.thread = threading.Thread(target=self.loop.run_forever, name="simfleet", daemon=True)
        self.fleet = SimFleet(*args, **kwargs)

    @property
    def nodes(self) -> list[SimNode]:
        return self.fleet.nodes

    def _call(self, coro, timeout: float = 120):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> FleetThread:
        self.thread.start()
        self._call(self.fleet.start())
        return self

    def stop(self) -> None:
        if not self.thread.is_alive():
            return
        self._call(self.fleet.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def set_mode(self, which: int | str, service: str, mode: Mode | str) -> None:
        self._call(self.fleet.set_mode(which, service, mode))

    def set_node_mode(self, which: int | str, mode: Mode | str) -> None:
        self._call(self.fleet.set_node_mode(which, mode))

    def __enter__(self) -> FleetThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
