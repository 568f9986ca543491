"""sys-exporter: the host's CPU, memory, load, disks, filesystems, network and uptime.

One module per /proc or /sys source, each with a pure ``parse_*`` function and a
source class that reads through the configured roots. Metric names are
node_exporter's, so existing node dashboards and alerts work unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from exporters.host.cpu import CpuSource, StatSource
from exporters.host.disk import DiskstatsSource
from exporters.host.filesystem import FilesystemSource
from exporters.host.memory import LoadavgSource, MeminfoSource
from exporters.host.network import NetClassSource, NetDevSource
from exporters.host.system import TimeSource, UnameSource
from exporters.runtime import Exporter, Options, Roots, Source


def sources(
    roots: Roots, statvfs: Callable | None = None, machine: str | None = None
) -> list[Source]:
    """Every sys-exporter source reading through ``roots``; ``statvfs``/``machine`` for tests."""
    return [
        CpuSource(roots),
        StatSource(roots),
        MeminfoSource(roots),
        LoadavgSource(roots),
        DiskstatsSource(roots),
        FilesystemSource(roots, statvfs=statvfs),
        NetDevSource(roots),
        NetClassSource(roots),
        TimeSource(),
        UnameSource(roots, machine=machine),
    ]


def build(options: Options) -> Exporter:
    return Exporter("sys-exporter", sources(options.roots), timeout=options.timeout)
