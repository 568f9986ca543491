"""Memory, swap and load average (node_exporter's meminfo and loadavg collectors)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from exporters.runtime import Roots, read_required


def parse_meminfo(text: str) -> dict[str, float]:
    """Parse /proc/meminfo into node_exporter's names: value in bytes when the unit is kB.

    ``Active(anon)`` becomes ``Active_anon_bytes``; unitless lines (HugePages_Total)
    keep their bare name, as node_exporter does.
    """
    values: dict[str, float] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            continue
        name = re.sub(r"\((.*)\)", r"_\1", key.strip())
        value = float(parts[0])
        if len(parts) > 1 and parts[1] == "kB":
            values[f"{name}_bytes"] = value * 1024
        else:
            values[name] = value
    return values


def parse_loadavg(text: str) -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages from /proc/loadavg."""
    parts = text.split()
    if len(parts) < 3:
        raise ValueError(f"unexpected /proc/loadavg content: {text!r}")
    return float(parts[0]), float(parts[1]), float(parts[2])


class MeminfoSource:
    """node_memory_*_bytes, one gauge per /proc/meminfo line (swap included)."""

    name = "meminfo"
    inline = True  # in-memory procfs: cannot block

    def __init__(self, roots: Roots):
        self.path = roots.proc("meminfo")

    def collect(self) -> Iterable[Metric]:
        text = read_required(self.path)
        for name, value in parse_meminfo(text).items():
            yield GaugeMetricFamily(
                f"node_memory_{name}", f"Memory information field {name}.", value=value
            )


class LoadavgSource:
    """node_load1, node_load5, node_load15."""

    name = "loadavg"
    inline = True  # in-memory procfs: cannot block

    def __init__(self, roots: Roots):
        self.path = roots.proc("loadavg")

    def collect(self) -> Iterable[Metric]:
        text = read_required(self.path)
        for minutes, value in zip((1, 5, 15), parse_loadavg(text), strict=True):
            yield GaugeMetricFamily(f"node_load{minutes}", f"{minutes}m load average.", value=value)
