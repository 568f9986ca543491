"""Reading the host: where its /sys, /proc, /dev and / are, and small readers for them.

The node's equivalent of node_exporter's procfs/sysfs library: the exporters turn
these readings into metrics, `mac doctor`'s checks and the registration use them too,
and tests point every root at a fixture tree. Also where the node's node_exporter
program is (sys-exporter is that program), and the host's own addresses.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psutil

from contract.services import SYS_EXPORTER


@dataclass(frozen=True)
class Roots:
    """Where the host is read; tests point each root at a fixture tree.

    ``rootfs`` is the host's ``/`` for everything that is not /proc, /sys or /dev
    (``/etc/os-release``, ``/opt/rocm``, mount points), like node_exporter's
    ``--path.rootfs``. ``etc_root``, ``run_root``, ``usr_root`` and ``lib_root`` move one
    of those folders on its own (`mac doctor` in tests: MAC_ETC_ROOT...); empty, it is
    under ``rootfs``. `mac` reads them from the node's settings (NodeConfig.roots), an
    exporter from its --*-root flags.
    """

    sys_root: str = "/sys"
    proc_root: str = "/proc"
    dev_root: str = "/dev"
    rootfs: str = "/"
    etc_root: str = ""
    run_root: str = ""
    usr_root: str = ""
    lib_root: str = ""

    def sys(self, *parts: str) -> Path:
        return Path(self.sys_root, *parts)

    def proc(self, *parts: str) -> Path:
        return Path(self.proc_root, *parts)

    def dev(self, *parts: str) -> Path:
        return Path(self.dev_root, *parts)

    def _moved(self) -> tuple[tuple[str, str], ...]:
        """Each host folder read from a root of its own, as (host path, root)."""
        under = {name: str(Path(self.rootfs, name)) for name in ("etc", "run", "usr", "lib")}
        return (
            ("/proc", self.proc_root),
            ("/sys", self.sys_root),
            ("/dev", self.dev_root),
            ("/etc", self.etc_root or under["etc"]),
            ("/run", self.run_root or under["run"]),
            ("/usr", self.usr_root or under["usr"]),
            ("/lib", self.lib_root or under["lib"]),
        )

    def host(self, path: str) -> Path:
        """Where a host path (absolute, as the host sees it: /etc/sysctl.d/...) is read here."""
        for prefix, root in self._moved():
            if path == prefix or path.startswith(prefix + "/"):
                return Path(root, path[len(prefix) :].lstrip("/"))
        return Path(self.rootfs, path.lstrip("/"))

    def host_path(self, local: Path | str) -> str:
        """The host path that a path read here stands for: what a printed command must name."""
        for prefix, root in self._moved():
            try:
                rest = Path(local).relative_to(root)
            except ValueError:
                continue
            return prefix if str(rest) == "." else f"{prefix}/{rest}"
        try:
            rest = Path(local).relative_to(self.rootfs)
        except ValueError:
            return str(local)
        return f"/{rest}" if str(rest) != "." else "/"


def host_addresses() -> list[str]:
    """Every address of this host's network interfaces now (IPv4 and IPv6, no scope)."""
    found = [
        entry.address.split("%")[0]
        for entries in psutil.net_if_addrs().values()
        for entry in entries
        if entry.family in (socket.AF_INET, socket.AF_INET6)
    ]
    return list(dict.fromkeys(found))


def read_text(path: Path | str) -> str | None:
    """The content of a small sysfs/procfs file, or None when it is absent or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_required(path: Path | str) -> str:
    """The content of the file a source cannot do without; raises, naming it, otherwise."""
    text = read_text(path)
    if text is None:
        raise FileNotFoundError(f"{path} is not readable")
    return text


def list_dir(path: Path | str) -> list[str]:
    """The sorted names in a sysfs directory; empty when it is absent or unreadable."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def read_value(path: Path | str) -> str | None:
    """A one-line sysfs attribute, stripped; None when absent or empty."""
    text = read_text(path)
    if text is None:
        return None
    text = text.strip()
    return text or None


def read_int(path: Path | str) -> int | None:
    """A sysfs attribute parsed as an integer (decimal or 0x hex); None when it is not one."""
    text = read_value(path)
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def read_boot_id(roots: Roots) -> str:
    """The kernel's id of this boot (a new one at every boot); "" where /proc has none."""
    return read_value(roots.proc("sys", "kernel", "random", "boot_id")) or ""


# Debian's package name and binary; upstream tarballs install ``node_exporter``.
PACKAGE = "prometheus-node-exporter"
PROGRAMS = ("/usr/bin/prometheus-node-exporter", "prometheus-node-exporter", "node_exporter")
INSTALL_FIX = f"sudo apt-get install -y {PACKAGE}"


RTF_UP, RTF_GATEWAY = 0x1, 0x2  # /proc/net/route flags (linux/route.h)


class DefaultRoute(NamedTuple):
    interface: str
    gateway: str  # dotted IPv4; "" for a default route with no gateway (point-to-point)


def default_route(text: str) -> DefaultRoute | None:
    """The lowest-metric default route that is up, in /proc/net/route's format."""
    best: tuple[int, DefaultRoute] | None = None
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        iface, destination, gateway, flags, metric, mask = (fields[i] for i in (0, 1, 2, 3, 6, 7))
        try:
            bits, rank, address = int(flags, 16), int(metric), int(gateway, 16)
        except ValueError:
            continue
        default = bits & RTF_UP and destination == "00000000" and mask == "00000000"
        if default and (best is None or rank < best[0]):
            # The kernel writes the address in host byte order ("=": this machine's own).
            via = socket.inet_ntoa(struct.pack("=I", address)) if bits & RTF_GATEWAY else ""
            best = (rank, DefaultRoute(iface, via))
    return best[1] if best else None


class NodeExporterMissing(RuntimeError):
    """node_exporter is not installed where MAC looks for it."""

    def __init__(self, looked: str) -> None:
        super().__init__(
            f"node_exporter is not installed (looked for {looked}); sys-exporter "
            f"(:{SYS_EXPORTER.port}) is node_exporter. Install it with: {INSTALL_FIX}"
        )


def find_node_exporter(explicit: str | None = None, path: str | None = None) -> str:
    """The node_exporter program: ``explicit`` (MAC_NODE_EXPORTER), Debian's, else PATH's.

    ``path`` (a PATH string) replaces the process PATH and Debian's fixed location,
    so a test can point the search at a prepared directory.
    """
    if explicit:
        candidates: tuple[str, ...] = (explicit,)
    else:
        candidates = PROGRAMS if path is None else PROGRAMS[1:]
    for candidate in candidates:
        found = shutil.which(candidate, path=path)
        if found:
            return found
    raise NodeExporterMissing(", ".join(candidates))
