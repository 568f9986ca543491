"""What a master's containers need to know of slurm.conf: where slurmctld and slurmdbd are,
and munge's socket.

Slurm's tools in MAC's image read the cluster's own slurm.conf, mounted from the host.
Three of its lines decide whether they can reach Slurm's daemons from a container: the
controllers (`SlurmctldHost=name` or `name(address)`, or the older `ControlMachine` with
`ControlAddr`, and their backups), the accounting daemon sacct asks
(`AccountingStorageHost`, Slurm's default `localhost`, and its backup, where
`AccountingStorageType` is slurmdbd) and munge's socket (`AuthInfo=socket=PATH`, else
munge's default). As slurm.conf(5) has it: keys are case-insensitive, spaces may stand
around `=`, a value may be quoted, `#` starts a comment, a line ending in `\\` goes on
on the next, and `Include` reads another file (relative to slurm.conf's folder, `%c` the
ClusterName given above it); everything else is left to Slurm. The files it includes
are listed too: a container that mounts slurm.conf's folder needs theirs as well.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
_MAX_INCLUDES = 8
_PAIR = re.compile(r'([A-Za-z][\w.]*)\s*=\s*("[^"]*"|\S+)')
# Slurm's AccountingStorageHost where slurm.conf names none.
DEFAULT_ACCOUNTING_HOST = "localhost"
# Names that mean "this machine" wherever they are looked up, a container included.
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


@dataclass(frozen=True)
class Controller:
    """One Slurm daemon's host (slurmctld, or slurmdbd for accounting): the name
    slurm.conf gives it, and its address where it says one (an IP address, or a host
    name of the control network)."""

    name: str
    address: str | None = None

    @property
    def target(self) -> str:
        """What Slurm's tools connect to: the address, else the name."""
        return self.address or self.name

    @property
    def ip(self) -> bool:
        try:
            ipaddress.ip_address(self.target)
        except ValueError:
            return False
        return True

    @property
    def loopback(self) -> bool:
        """True where slurm.conf points at this machine itself: a loopback address, or
        localhost, which a container reads as its own."""
        if self.target.lower() in _LOCAL_NAMES:
            return True
        return self.ip and ipaddress.ip_address(self.target).is_loopback


@dataclass(frozen=True)
class SlurmConf:
    path: Path
    controllers: tuple[Controller, ...]
    munge_socket: Path
    # slurmdbd and its backup, where accounting goes through it (sacct asks it); else ()
    accounting: tuple[Controller, ...] = ()
    # Every file its Include lines read, as Slurm opens them (existing ones, in order).
    includes: tuple[Path, ...] = ()


def _logical_lines(text: str) -> list[str]:
    lines, pending = [], ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return [*lines, pending] if pending else lines


def _pairs(
    path: Path, includes: list[Path], depth: int = 0, folder: Path | None = None
) -> list[tuple[str, str]]:
    """(key in lower case, value) of every `Key=Value` of `path` and the files it
    includes, which are added to `includes`. Relative names are read from `folder`,
    slurm.conf's own, whichever file includes them (as Slurm does)."""
    folder = folder or path.parent
    pairs: list[tuple[str, str]] = []
    for line in _logical_lines(path.read_text(errors="replace")):
        words = line.split(None, 1)
        if not words:
            continue
        if words[0].lower() == "include" and len(words) == 2 and "=" not in words[0]:
            if depth < _MAX_INCLUDES:
                name = words[1].strip().strip('"')
                cluster = dict(pairs).get("clustername")
                if cluster:
                    name = name.replace("%c", cluster)
                included = folder / name  # an absolute name stays itself
                if included.is_file():
                    includes.append(included)
                    pairs += _pairs(included, includes, depth + 1, folder)
            continue
        pairs += [(key.lower(), value.strip('"')) for key, value in _PAIR.findall(line)]
    return pairs


def _controller(value: str) -> Controller:
    name, _, address = value.partition("(")
    return Controller(name.strip(), address.rstrip(")").strip() or None)


def read_slurm_conf(path: Path) -> SlurmConf:
    """The controllers, slurmdbd and munge's socket of the slurm.conf at `path` (OSError
    if unreadable)."""
    includes: list[Path] = []
    pairs = _pairs(path, includes)
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
    accounting = []
    if "slurmdbd" in values.get("accountingstoragetype", "").lower():
        accounting.append(
            Controller(values.get("accountingstoragehost") or DEFAULT_ACCOUNTING_HOST)
        )
        if values.get("accountingstoragebackuphost"):
            accounting.append(Controller(values["accountingstoragebackuphost"]))
    return SlurmConf(path, tuple(controllers), socket, tuple(accounting), tuple(includes))
