"""The fleet itself: fake agents on loopback addresses, each port switchable at run time."""

from __future__ import annotations

import asyncio
import functools
import gzip
import ipaddress
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, generate_latest

from contract.liveness import loop_factory, raise_nofile_limit
from contract.services import BY_NAME, NIC_EXPORTER, SYS_EXPORTER, AgentNetwork, Service
from contract.verdicts import VERDICT_METRICS
from node.gpu.health import DEFAULT_WINDOW, AmdReading, NvidiaReading
from testkit.ports import check_contract_ports
from testkit.simfleet.health import SimVerdicts
from testkit.simfleet.model import Event, Fault
from testkit.simfleet.profiles import (
    FAULT_RATE,
    SimHardware,
    assign,
    parse_mix,
    registration_nics,
    template,
)
from testkit.xdistworker import worker_number

DEFAULT_BASE = "127.20.0.0"
DEFAULT_SERVICES = (SYS_EXPORTER.name, NIC_EXPORTER.name)
MAX_REQUEST = 16 * 1024  # a request head larger than this is answered 431 and dropped


_block_counter = iter(range(1, 10_000))


def loopback_base() -> str:
    """A fresh 127.A.B.0 block for one fleet: A from our pid, B from a counter.

    Every test run gets its own block, so parallel runs never collide on 29101; the
    workers of one xdist run (testkit.xdistworker) get distinct A's for certain.
    """
    number, count = worker_number(), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    first = os.getpid() % 150 if number is None else os.getpid() % (150 // count) * count + number
    return f"127.{100 + first}.{next(_block_counter) % 250}.0"


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
    answer: bytes | Callable[[], bytes]  # a callable renders the page (CollectedPage: cached)
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
    # A GPU exporter's verdict lines: what `/metrics?name[]=mac_gpu_health...` (the
    # master's probe query, contract.verdicts) answers.
    verdicts: Callable[[], bytes] | None = None

    def reply(self, path: bytes, gzipped: bool = False) -> bytes | None:
        """The bytes to send for a request of `path` in the current mode; None = hang.
        `gzipped`: the client accepts gzip (served only by a CollectedPage)."""
        self.requests += 1
        if self.on_request is not None:
            self.on_request()
        if self.mode is Mode.HANG:
            return None
        if self.mode is Mode.HTTP_500:
            return _response("500 Internal Server Error", "text/plain", b"exporter failed\n")
        path, _, query = path.partition(b"?")
        if path != self.service.liveness_path.encode():
            if path in self.others and self.mode is not Mode.BAD_BODY:
                return self.others[path]
            return _response("404 Not Found", "text/plain", b"not found\n")
        if self.mode is Mode.BAD_BODY:
            return _response("200 OK", "text/html", b"<html><body>login</body></html>\n")
        names = parse_qs(query.decode("latin-1")).get("name[]") if query else None
        if names and self.verdicts is not None and set(names) <= set(VERDICT_METRICS):
            return _response("200 OK", "text/plain; version=0.0.4; charset=utf-8", self.verdicts())
        if isinstance(self.answer, CollectedPage):
            return self.answer(gzipped)
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
        head = self.buffer.split(b"\r\n\r\n", 1)[0].lower()
        reply = self.port.reply(path, b"accept-encoding:" in head and b"gzip" in head)
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


def healthy_verdicts(service: Service, hostname: str, token: str) -> bytes:
    """The verdicts of a plain node's GPU exporter: eight GPUs, all healthy, one boot."""
    count, vendor = 8, service.gpu_vendor
    verdicts = SimVerdicts(vendor, count, token, DEFAULT_WINDOW)
    kind = NvidiaReading if vendor == "nvidia" else AmdReading
    readings = [kind(gpu, *verdicts.identity(gpu)) for gpu in range(count)]
    return verdicts.page(hostname, readings, f"{token}-0000-4000-8000-000000000000", time.time())


TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


class CollectedPage:
    """A node's exporter page as a real exporter serves it: collected at most once per
    `interval` seconds of `clock` (dcgm-exporter and node_exporter's textfile collector
    read the hardware on a timer, not per scrape) and gzipped at most once per
    collection, when a scraper asks for gzip. interval 0: rendered at every request.
    `forget()` drops the cached page (a fault injected now shows at the next scrape)."""

    def __init__(
        self, render: Callable[[], bytes], clock: Callable[[], float], interval: float = 0.0
    ) -> None:
        self.render, self.clock, self.interval = render, clock, interval
        self.tick: int | None = None
        self.plain = b""
        self.packed: bytes | None = None

    def forget(self) -> None:
        self.tick = None

    def __call__(self, gzipped: bool = False) -> bytes:
        if self.interval <= 0:
            return _response("200 OK", TEXT_FORMAT, self.render())
        tick = int(self.clock() // self.interval)
        if tick != self.tick:
            self.tick, self.plain, self.packed = tick, self.render(), None
        if not gzipped:
            return _response("200 OK", TEXT_FORMAT, self.plain)
        if self.packed is None:
            self.packed = gzip.compress(self.plain, compresslevel=1)
        return _gzip_response(self.packed)


def _gzip_response(body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: {TEXT_FORMAT}\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _page_for(
    hardware: SimHardware, service: Service, hostname: str, collect_interval: float = 0.0
) -> CollectedPage:
    return CollectedPage(
        lambda: hardware.page(service.name, hostname) or b"", hardware.clock, collect_interval
    )


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
    ``collect_interval`` > 0 renders each page at most once per that many seconds, as a
    real exporter's collection does (CollectedPage); 0 renders it at every scrape.
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
        evidence_window: float = DEFAULT_WINDOW,
        control_dir: str | os.PathLike | None = None,
        collect_interval: float = 0.0,
    ) -> None:
        names = list(services)
        unknown = [name for name in names if name not in BY_NAME]
        if unknown:
            raise ValueError(f"unknown service {unknown[0]!r}; known: {', '.join(sorted(BY_NAME))}")
        addresses = list(ips) if ips else node_addresses(count, base)
        started = time.monotonic()
        self.clock = lambda: time.monotonic() - started
        epoch = time.time()  # the Unix time of the clock's 0: when GPU evidence was seen
        self.control_dir = control_dir
        self.control = None  # testkit.simfleet.control.ControlServer once started
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
                for port in ports.values():
                    if port.service.gpu_vendor:
                        token = f"{int(ipaddress.IPv4Address(ip)):08x}"
                        page = healthy_verdicts(port.service, hostname, token)
                        port.verdicts = lambda page=page: page
                self.nodes.append(SimNode(index, ip, hostname, ports))
                continue
            hardware = SimHardware(
                kinds[index], seed, ip, self.clock, fault_rate, window=evidence_window, epoch=epoch
            )
            ports = {}
            for name in hardware.profile.services:
                service = BY_NAME[name]
                others = other_pages(service, hostname)
                if service.liveness_path == "/metrics":
                    answer = _page_for(hardware, service, hostname, collect_interval)
                else:
                    answer = _body_for(service, hostname, b"")
                ports[name] = Port(ip, service, answer, others)
                if service.gpu_vendor:
                    ports[name].verdicts = functools.partial(hardware.verdict_page, hostname)
            self.nodes.append(SimNode(index, ip, hostname, ports, hardware))
        self.by_ip = {node.ip: node for node in self.nodes}
        self.by_hostname = {node.hostname: node for node in self.nodes}

    def _hardware(self, which: int | str) -> SimHardware:
        node = self.node(which)
        if node.hardware is None:
            raise ValueError(f"node {which!r} has no hardware profile to fail")
        # What is done to the node shows at its next scrape, whatever was collected.
        for port in node.ports.values():
            if isinstance(port.answer, CollectedPage):
                port.answer.forget()
        return node.hardware

    def inject(
        self,
        which: int | str,
        fault: Fault | str,
        target: int = 0,
        xid: int = 0,
        length: float | None = None,
    ) -> Event:
        """Start a fault now on one node's GPU or NIC ``target`` (a node with a profile)."""
        return self._hardware(which).inject(fault, target, xid, length=length)

    def heal(self, which: int | str) -> list[Event]:
        """End the faults going on now on one node (testkit.simfleet.profiles.SimHardware.heal)."""
        return self._hardware(which).heal()

    def reboot(self, which: int | str) -> str:
        """Reboot one node's simulated hardware; returns its new boot_id."""
        hardware = self._hardware(which)
        hardware.reboot()
        return hardware.boot_id

    async def start(self) -> None:
        """Listen on every node's ports; ContractPortHeld (nothing bound) when a listener
        on every address, a MAC agent's, keeps the fleet from the contract's ports."""
        check_contract_ports(
            (node.ip for node in self.nodes),
            {port.service.port for node in self.nodes for port in node.ports.values()},
        )
        raise_nofile_limit()
        for node in self.nodes:
            for port in node.ports.values():
                await self._apply(port, port.mode)
        if self.control_dir is not None:
            from testkit.simfleet.control import ControlServer

            self.control = ControlServer(self, self.control_dir)
            await self.control.start()

    async def stop(self) -> None:
        if self.control is not None:
            await self.control.stop()
            self.control = None
        for node in self.nodes:
            for port in node.ports.values():
                await self._close(port)

    def node(self, which: int | str) -> SimNode:
        """A node by index, address or host name (KeyError naming it when there is none)."""
        if isinstance(which, int):
            return self.nodes[which]
        found = self.by_ip.get(which) or self.by_hostname.get(which)
        if found is None:
            raise KeyError(which)
        return found

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
        try:
            self._call(self.fleet.start())
        except BaseException:
            self.stop()  # what did bind, and the loop's thread
            raise
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

    def inject(
        self,
        which: int | str,
        fault: Fault | str,
        target: int = 0,
        xid: int = 0,
        length: float | None = None,
    ) -> Event:
        return self.loop_call(self.fleet.inject, which, fault, target, xid, length)

    def heal(self, which: int | str) -> list[Event]:
        return self.loop_call(self.fleet.heal, which)

    def reboot(self, which: int | str) -> str:
        return self.loop_call(self.fleet.reboot, which)

    def loop_call(self, function, *args):
        """Run a plain function on the fleet's loop thread (the state it touches lives there)."""

        async def call():
            return function(*args)

        return self._call(call())

    def __enter__(self) -> FleetThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
