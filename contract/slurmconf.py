"""What a master's containers need to know of slurm.conf: where slurmctld is, and munge's socket.

Slurm's tools in MAC's image read the cluster's own slurm.conf, mounted from the host.
Two of its lines decide whether they can reach the controller from a container: the
controllers (`SlurmctldHost=name` or `name(address)`, or the older `ControlMachine` with
`ControlAddr`, and their backups) and munge's socket (`AuthInfo=socket=PATH`, else
munge's default). Keys are case-insensitive, `#` starts a comment and `Include` reads
another file, as slurm.conf(5) says; everything else is left to Slurm.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
_MAX_INCLUDES = 8


@dataclass(frozen=True)
class Controller:
    """One slurmctld: the name slurm.conf gives it, and its address where it says one."""

    name: str
    address: str | None = None

    @property
    def loopback(self) -> bool:
        """True where slurm.conf gives a loopback address (127.0.0.1, ::1)."""
        try:
            return self.address is not None and ipaddress.ip_address(self.address).is_loopback
        except ValueError:
            return False


@dataclass(frozen=True)
class SlurmConf:
    path: Path
    controllers: tuple[Controller, ...]
    munge_socket: Path


def _lines(path: Path, depth: int = 0) -> list[tuple[str, str]]:
    """(key in lower case, value) of every `Key=Value` of `path` and the files it includes."""
    pairs: list[tuple[str, str]] = []
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        head, _, rest = line.partition(" ")
        if head.lower() == "include" and rest.strip() and depth < _MAX_INCLUDES:
            included = Path(rest.strip())
            included = included if included.is_absolute() else path.parent / included
            if included.is_file():
                pairs += _lines(included, depth + 1)
            continue
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep:
                pairs.append((key.lower(), value.strip().strip('"')))
    return pairs


def _controller(value: str) -> Controller:
    name, _, address = value.partition("(")
    return Controller(name.strip(), address.rstrip(")").strip() or None)


def read_slurm_conf(path: Path) -> SlurmConf:
    """The controllers and munge's socket of the slurm.conf at `path` (OSError if unreadable)."""
    pairs = _lines(path)
    values = dict(pairs)
    controllers = [_controller(value) for key, value in pairs if key == "slurmctldhost"]
    if not controllers and values.get("controlmachine"):
        controllers.append(Controller(values["controlmachine"], values.get("controladdr")))
        if values.get("backupcontroller"):
            controllers.append(Controller(values["backupcontroller"], values.get("backupaddr")))
    socket = DEFAULT_MUNGE_SOCKET
    for option in values.get("authinfo", "").split(","):
        key, sep, value = option.partition("=")
        if sep and key.strip().lower() == "socket" and value.strip():
            socket = Path(value.strip())
    return SlurmConf(path, tuple(controllers), socket)
