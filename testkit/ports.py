"""Free loopback ports for the real servers that tests and benchmarks start."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def listening_port(host: str = "127.0.0.1", taken: set[int] | None = None) -> int:
    """A free TCP port below the kernel's ephemeral range, for a server started later.

    free_port() hands out a port from the ephemeral range, which the kernel also gives to
    outgoing connections: when many daemons start together and connect to each other
    (a Slurm lab's slurmd and slurmctld), one of those can take the port before the
    server that was meant to listen there binds it. Below the range that cannot happen.
    `taken`: ports already promised to this caller, not handed out again.
    """
    low = _ephemeral_low()
    candidates = list(range(max(1024, low - 12000), low))
    random.shuffle(candidates)
    for port in candidates:
        if taken and port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port below the ephemeral range ({low}) on {host}")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
