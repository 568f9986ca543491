"""The fleet itself: fake agents on loopback addresses, each port switchable at run time."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, generate_latest

from contract.liveness import loop_factory, raise_nofile_limit
from contract.services import BY_NAME, NIC_EXPORTER, SYS_EXPORTER, AgentNetwork, Service
from testkit.simfleet.model import Event, Fault
from testkit.simfleet.profiles import (
    FAULT_RATE,
    SimHardware,
    assign,
    parse_mix,
    registration_nics,
    template,
)

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
    answer: bytes | Callable[[], bytes]  # a callable renders the page per request
    # The other paths the real exporter serves (exporters.server: every exporter has
    # both /metrics and /health), so that Prometheus' scrape of a /health-probed
    # service (sys-manager, bmc-agent) gets a page, not a 404.
    others: dict[bytes, bytes] = field(default_factory=dict)
    mode: Mode = Mode.ANSWER
    server: asyncio.base_events.Server | None = None
    blackhole: list[socket.socket] = field(default_factory=list)
    hung: set[asyncio.Transport] = field(default_factory=set)
    requests: int = 0
    # Called (on the fleet's thread) as each request arrives, before any answer: a test
    # acts while the prober is provably waiting on this port, not at a guessed moment.
    on_request: Callable[[], None] | None = None

    def reply(self, path: bytes) -> bytes | None:
        """The bytes to send for a request of `path` in the current mode; None = hang."""
        self.requests += 1
        if self.on_request is not None:
            self.on_request()
        if self.mode is Mode.HANG:
            return None
        if self.mode is Mode.HTTP_500:
            return _response("500 Internal Server Error", "text/plain", b"exporter failed\n")
        path = path.split(b"?", 1)[0]
        if path != self.service.liveness_path.encode():
            if path in self.others and self.mode is not Mode.BAD_BODY:
                return self.others[path]
            return _response("404 Not Found", "text/plain", b"not found\n")
        if self.mode is Mode.BAD_BODY:
            return _response("200 OK", "text/html", b"<html><body>login</body></html>\n")
        return self.answer() if callable(self.answer) else self.answer


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


def service_page(service: Service) -> bytes:
    """The /metrics page of a service probed on /health: sys-manager's check results (all
    passing, in its own names) or the shared runtime's collector gauge (bmc-agent)."""
    registry = CollectorRegistry()
    if service.name == "sys-manager":
        checks = Gauge(
            "mac_node_check_status",
            "1 for the outcome (pass, warn, fail, skip) of each troubleshooting check.",
            ["check", "status"],
            registry=registry,
        )
        for check in ("master_ip", "master_reachable", "registered", "ip_forward"):
            for status in ("pass", "warn", "fail", "skip"):
                checks.labels(check, status).set(1.0 if status == "pass" else 0.0)
    else:
        Gauge(
            "mac_exporter_collector_success",
            "1 when the collector's last run succeeded.",
            ["collector"],
            registry=registry,
        ).labels(service.name).set(1.0)
    return generate_latest(registry)


def other_pages(service: Service, hostname: str) -> dict[bytes, bytes]:
    """What the real exporter serves beside its liveness URL (see Port.others)."""
    if service.liveness_path == "/docs":  # mango-sdk-agent: an HTTP API, no /metrics
        return {}
    health = json.dumps({"status": "ok", "service": service.name, "node": hostname}).encode()
    pages = {b"/health": _response("200 OK", "application/json", health)}
    if service.liveness_path != "/metrics":
        pages[b"/metrics"] = _response(
            "200 OK", "text/plain; version=0.0.4; charset=utf-8", service_page(service)
        )
    return pages


def _page_for(hardware: SimHardware, service: Service, hostname: str) -> Callable[[], bytes]:
    def answer() -> bytes:
        page = hardware.page(service.name, hostname)
        return _response("200 OK", "text/plain; version=0.0.4; charset=utf-8", page or b"")

    return answer


@dataclass(eq=False)
class SimNode:
    index: int
    ip: str
    hostname: str
    ports: dict[str, Port]
    hardware: SimHardware | None = None  # None: a plain node with fixed pages

    def registration(self) -> dict:
        """The hardware fields of this node's registration body (an agent in host mode)."""
        if self.hardware is None:
            return {}
        profile = self.hardware.profile
        return {
            "gpu_vendor": profile.gpu_vendor,
            "gpu_model": profile.gpu_model,
            "gpu_count": profile.gpu_count,
            "nics": list(registration_nics(profile.name)),
            "agent_network": AgentNetwork.HOST.value,
        }

    def exporters(self) -> dict[str, int]:
        """What this node would report at registration ({service: port})."""
        return {name: port.service.port for name, port in self.ports.items()}


class SimFleet:
    """The fleet inside one running event loop.

    Plain nodes serve fixed pages on ``services``. With ``profiles`` (a mix such as
    ``nvidia=60,amd=30,cpu=10``) each node gets a hardware profile, serves that
    profile's services and renders its exporters' pages per scrape from ``seed``,
    its address and the seconds since the fleet was made; ``fault_rate`` is each node's
    chance of a fault per 10 minutes (0: only the faults ``inject`` starts).
    """

    def __init__(
        self,
        count: int = 0,
        *,
        base: str = DEFAULT_BASE,
        ips: Sequence[str] | None = None,
        services: Iterable[str] = DEFAULT_SERVICES,
        profiles: str | None = None,
        seed: int = 0,
        fault_rate: float = FAULT_RATE,
    ) -> None:
        names = list(services)
        unknown = [name for name in names if name not in BY_NAME]
        if unknown:
            raise ValueError(f"unknown service {unknown[0]!r}; known: {', '.join(sorted(BY_NAME))}")
        addresses = list(ips) if ips else node_addresses(count, base)
        started = time.monotonic()
        self.clock = lambda: time.monotonic() - started
        kinds = assign(len(addresses), parse_mix(profiles)) if profiles else None
        for kind in set(kinds or ()):
            for name in kind.services:  # now: building one on the first scrape stalls the loop
                template(kind.name, name)
            registration_nics(kind.name)
        self.nodes: list[SimNode] = []
        for index, ip in enumerate(addresses):
            hostname = hostname_for(ip)
            if kinds is None:
                exposition = render_exposition(hostname)
                ports = {
                    name: Port(
                        ip,
                        BY_NAME[name],
                        _body_for(BY_NAME[name], hostname, exposition),
                        other_pages(BY_NAME[name], hostname),
                    )
                    for name in names
                }
                self.nodes.append(SimNode(index, ip, hostname, ports))
                continue
            hardware = SimHardware(kinds[index], seed, ip, self.clock, fault_rate)
            ports = {}
            for name in hardware.profile.services:
                service = BY_NAME[name]
                others = other_pages(service, hostname)
                if service.liveness_path == "/metrics":
                    answer = _page_for(hardware, service, hostname)
                else:
                    answer = _body_for(service, hostname, b"")
                ports[name] = Port(ip, service, answer, others)
            self.nodes.append(SimNode(index, ip, hostname, ports, hardware))
        self.by_ip = {node.ip: node for node in self.nodes}

    def inject(self, which: int | str, fault: Fault | str, target: int = 0, xid: int = 0) -> Event:
        """Start a fault now on one node's GPU or NIC ``target`` (a node with a profile)."""
        hardware = self.node(which).hardware
        if hardware is None:
            raise ValueError(f"node {which!r} has no hardware profile to fail")
        return hardware.inject(fault, target, xid)

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

    def inject(self, which: int | str, fault: Fault | str, target: int = 0, xid: int = 0) -> Event:
        return self.loop_call(self.fleet.inject, which, fault, target, xid)

    def loop_call(self, function, *args):
        """Run a plain function on the fleet's loop thread (the state it touches lives there)."""

        async def call():
            return function(*args)

        return self._call(call())

    def __enter__(self) -> FleetThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
