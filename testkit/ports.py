"""Free loopback ports for the real servers that tests and benchmarks start."""

from __future__ import annotations

import os
import random
import socket
from collections import deque
from pathlib import Path

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
