"""Reading the host: where its /sys, /proc, /dev and / are, and small readers for them.

The node's equivalent of node_exporter's procfs/sysfs library: the exporters turn
these readings into metrics, `mac doctor`'s checks and the registration use them too,
and tests point every root at a fixture tree. Also where the node's node_exporter
program is (sys-exporter is that program).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from contract.services import SYS_EXPORTER


@dataclass(frozen=True)
class Roots:
    """Where the exporters read the host; tests point each one at a fixture tree.

    ``rootfs`` is the host's ``/`` for everything that is not /proc, /sys or /dev
    (``/etc/os-release``, ``/opt/rocm``, mount points), like node_exporter's
    ``--path.rootfs``.
    """

    sys_root: str = "/sys"
    proc_root: str = "/proc"
    dev_root: str = "/dev"
    rootfs: str = "/"

    def sys(self, *parts: str) -> Path:
        return Path(self.sys_root, *parts)

    def proc(self, *parts: str) -> Path:
        return Path(self.proc_root, *parts)

    def dev(self, *parts: str) -> Path:
        return Path(self.dev_root, *parts)

    def host(self, path: str) -> Path:
        """A host path (absolute, as the host sees it) under ``rootfs``."""
        return Path(self.rootfs, path.lstrip("/"))


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


# Debian's package name and binary; upstream tarballs install ``node_exporter``.
PACKAGE = "prometheus-node-exporter"
PROGRAMS = ("/usr/bin/prometheus-node-exporter", "prometheus-node-exporter", "node_exporter")
INSTALL_FIX = f"sudo apt-get install -y {PACKAGE}"


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
