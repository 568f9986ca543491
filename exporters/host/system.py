"""Wall clock and kernel identity (node_exporter's time and uname collectors)."""

from __future__ import annotations

import platform
import time
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from exporters.runtime import Roots, read_value


class TimeSource:
    """node_time_seconds: lets Prometheus spot a node whose clock drifts."""

    name = "time"
    inline = True  # in-memory procfs: cannot block

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "node_time_seconds", "System time in seconds since epoch (1970).", value=time.time()
        )


class UnameSource:
    """node_uname_info, read from /proc/sys/kernel so a fixture tree can stand in for it."""

    name = "uname"
    inline = True  # in-memory procfs: cannot block

    FIELDS = (
        ("sysname", "ostype"),
        ("release", "osrelease"),
        ("version", "version"),
        ("nodename", "hostname"),
        ("domainname", "domainname"),
    )

    def __init__(self, roots: Roots, machine: str | None = None):
        self.kernel = roots.proc("sys", "kernel")
        # The architecture is not in /proc/sys; it cannot differ from the exporter's own.
        self.machine = machine or platform.machine()

    def collect(self) -> Iterable[Metric]:
        labels = {label: read_value(self.kernel / name) or "" for label, name in self.FIELDS}
        labels["machine"] = self.machine
        info = InfoMetricFamily("node_uname", "Labeled system information as provided by uname.")
        info.add_metric([], labels)
        yield info
