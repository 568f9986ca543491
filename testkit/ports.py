"""Free loopback ports for the real servers that tests and benchmarks start, and whether
the agent's contract ports can be had on loopback addresses of our own."""

from __future__ import annotations

import errno
import ipaddress
import os
import random
import socket
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from contract.services import SERVICES

# MAC's own default ports (28080, Prometheus's 29090, the exporters' 29101..29500, the
# scale-out engines' 29428..29494): simulated nodes listen on them on addresses of their
# own, which a test's server bound to 0.0.0.0 on one of them would shut out.
MAC_DEFAULTS = range(28000, 30000)
# Ports this process handed out lately: a server may not have bound its port yet when
# the next one is asked for (a master's services start together).
_HANDED: deque[int] = deque(maxlen=1024)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, for a server started later.

    Below the kernel's ephemeral range (see listening_port), never one of MAC's defaults,
    and not one this process handed out lately.
    """
    return listening_port(host)


def listening_port(host: str = "127.0.0.1", taken: set[int] | None = None) -> int:
    """A free TCP port below the kernel's ephemeral range, for a server started later.

    A port from the ephemeral range (the kernel's answer to a bind to port 0) is one the
    kernel also gives to outgoing connections: when many daemons start together and
    connect to each other (a master's services to Redis and PostgreSQL, a Slurm lab's
    slurmd and slurmctld), one of those can take the port before the server that was
    meant to listen there binds it (seen: nginx's "bind() to 0.0.0.0:49595 failed (98:
    Address already in use)", and a master that never came up). Below the range that
    cannot happen. Each xdist worker draws from a slice of its own, so two workers never
    hand out the same port. `taken`: ports already promised to this caller.
    """
    low = _ephemeral_low()
    candidates = [
        port
        for port in _slice(range(max(1024, low - 12000), low))
        if port not in MAC_DEFAULTS and port not in _HANDED and not (taken and port in taken)
    ]
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _HANDED.append(port)
        return port
    raise OSError(f"no free port below the ephemeral range ({low}) on {host}")


def _slice(ports: range) -> range:
    """This xdist worker's share of `ports` (all of them outside xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if not worker.startswith("gw") or count < 2:
        return ports
    number = int(worker.removeprefix("gw")) % count
    size = len(ports) // count
    return ports[number * size : (number + 1) * size]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


class ContractPortHeld(OSError):
    """Someone listens on an agent contract port where a simulated agent must listen.

    The sweep probes the contract's fixed ports (contract.services), so a simulated fleet
    (testkit.simfleet) and the tests' own agents listen on those very ports, on loopback
    addresses of their own. On a MAC node the agent listens on them on every address
    (MAC_BIND=0.0.0.0, its default), and no other socket may then bind the port on any
    one address. The tests turn this error into a skip that says so (tests/conftest.py).
    """


# The kernel's TCP socket tables: the local address in hex (each 32-bit word in host
# order), the port in hex, and the state, 0A for a listener.
_TABLES = (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6))
_LISTEN = "0A"


def _listeners(ports: set[int]) -> list[tuple[str, int]]:
    """(address, port) of each TCP listener on one of `ports` (IPv4-mapped addresses as
    IPv4); none where /proc cannot be read."""
    found = []
    for table, family in _TABLES:
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != _LISTEN:
                continue
            hex_address, _, hex_port = fields[1].partition(":")
            port = int(hex_port, 16)
            if port not in ports:
                continue
            words = [int(hex_address[i : i + 8], 16) for i in range(0, len(hex_address), 8)]
            packed = b"".join(struct.pack("=I", word) for word in words)
            address = ipaddress.ip_address(socket.inet_ntop(family, packed))
            mapped = getattr(address, "ipv4_mapped", None)
            found.append((str(mapped or address), port))
    return found


def _bind_refused(address: str, port: int) -> bool:
    """Whether binding address:port fails as taken (what our servers' bind would meet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def contract_port_holders(
    addresses: Iterable[str], ports: Iterable[int] | None = None
) -> dict[int, str]:
    """{port: "address:port" of the listener} for each of `ports` (by default every agent
    contract port) that a listener keeps `addresses` (IPv4) from: one on every address
    (0.0.0.0; or :: where it takes IPv4 too, as it does unless IPV6_V6ONLY) or on one of
    `addresses` itself."""
    wanted = list(dict.fromkeys(addresses))
    if not wanted:
        return {}
    ours = set(wanted)
    held: dict[int, str] = {}
    candidates = {service.port for service in SERVICES} if ports is None else set(ports)
    for address, port in sorted(_listeners(candidates)):
        if port in held:
            continue
        if address == "0.0.0.0" or address in ours:
            held[port] = f"{address}:{port}"
        elif address == "::" and _bind_refused(wanted[0], port):
            held[port] = f"[::]:{port}"
    return held


def check_contract_ports(addresses: Iterable[str], ports: Iterable[int] | None = None) -> None:
    """Raise ContractPortHeld, naming the port and the way out, when a listener keeps
    `addresses` from one of `ports` (every agent contract port by default); before a
    simulated agent or a test's own exporter binds them."""
    wanted = list(dict.fromkeys(addresses))
    held = contract_port_holders(wanted, ports)
    if not held:
        return
    port, holder = min(held.items())
    others = sorted(set(held) - {port})
    also = f" (and {', '.join(map(str, others))})" if others else ""
    on = holder.rsplit(":", 1)[0]
    blocked = on if on in wanted else wanted[0]
    raise ContractPortHeld(
        f"agent contract port {port}{also} is taken here: {holder} listens, so a simulated "
        f"agent cannot listen on {blocked}:{port}. On a MAC node that is the agent's own "
        "listener (MAC_BIND=0.0.0.0, the default): give the agent MAC_BIND=<this node's IP> "
        "(mac env set --node MAC_BIND=<ip>, then mac restart agent), or run the tests on a "
        "machine without a MAC agent"
    )
