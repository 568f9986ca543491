"""Who holds a service's TCP port: checked before a start and after it.

Why: a service that finds its port taken dies at start ("Address already in use"), and
worse, a leftover that holds the port (a gunicorn worker orphaned by its master's
death) answers the liveness URL in the new service's place, so a start looked
successful while the new server had died (issue 11, fault 2). Both cases are named:
the pid and command line of the holder, and the command that frees the port.
"""

from __future__ import annotations

import os

import psutil

from maccli.output import CliError
from maccli.runtimes.base import ServiceSpec

_WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})


def _overlaps(bind: str, address: str) -> bool:
    """Whether a socket bound to `bind` would collide with one listening on `address`.

    A wildcard on either side takes the port on every address; two specific
    addresses (say 127.0.0.2 and 127.0.0.3) share a port number without harm.
    """
    return bind in _WILDCARDS or address in _WILDCARDS or bind == address


def listener(port: int, bind: str = "") -> tuple[int | None, str] | None:
    """(pid, command line) of whatever listens on TCP `port` where a service bound to
    `bind` would listen, None when nothing does."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return None
    for conn in connections:
        if (
            conn.status == psutil.CONN_LISTEN
            and conn.laddr
            and conn.laddr.port == port
            and _overlaps(bind, conn.laddr.ip)
        ):
            if conn.pid is None:
                return None, "a process of another user"
            try:
                return conn.pid, " ".join(psutil.Process(conn.pid).cmdline())[:160]
            except psutil.Error:
                return conn.pid, "?"
    return None


def check_port_free(role: str, spec: ServiceSpec) -> None:
    """A service about to start must find its port free, or it dies (or worse, the
    liveness check is answered by whatever holds the port)."""
    if spec.port is None:
        return
    holder = listener(spec.port, spec.bind)
    if holder is None:
        return
    pid, command = holder
    raise CliError(
        f"cannot start {spec.name}: port {spec.port} is already in use by "
        + (f"pid {pid} ({command})." if pid else f"{command}."),
        hint="Stop that process (a leftover of an earlier run?), then run again:",
        commands=[
            f"kill {pid}" if pid else f"ss -ltnp 'sport = :{spec.port}'",
            f"mac start {role}",
        ],
    )


def check_port_owner(role: str, spec: ServiceSpec, launcher_pid: int) -> None:
    """The liveness URL answered: make sure our new service answered, not another one."""
    if spec.port is None:
        return
    holder = listener(spec.port, spec.bind)
    if holder is None or holder[0] is None:
        return  # not visible to us (another user); the liveness answer has to do
    pid, command = holder
    try:
        ours = os.getpgid(pid) == launcher_pid
    except ProcessLookupError:
        ours = False
    if not ours:
        raise CliError(
            f"{spec.name} did not start: port {spec.port} is held by pid {pid} ({command}), "
            f"not by the new {spec.name}.",
            hint="Stop that process, then run again:",
            commands=[f"kill {pid}", f"mac restart {role}"],
        )
