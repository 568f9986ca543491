"""Block device I/O from /proc/diskstats (node_exporter's diskstats collector)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporters.runtime import Roots, read_required

# node_exporter's default: partitions, loop and ram devices only repeat their parent.
IGNORED_DEVICES = re.compile(r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$")
SECTOR_BYTES = 512

# (field index after major/minor/name, metric, help, scale, counter?)
FIELDS = (
    (
        0,
        "node_disk_reads_completed_total",
        "The total number of reads completed successfully.",
        1,
        True,
    ),
    (1, "node_disk_reads_merged_total", "The total number of reads merged.", 1, True),
    (
        2,
        "node_disk_read_bytes_total",
        "The total number of bytes read successfully.",
        SECTOR_BYTES,
        True,
    ),
    (
        3,
        "node_disk_read_time_seconds_total",
        "The total number of seconds spent by all reads.",
        0.001,
        True,
    ),
    (
        4,
        "node_disk_writes_completed_total",
        "The total number of writes completed successfully.",
        1,
        True,
    ),
    (5, "node_disk_writes_merged_total", "The number of writes merged.", 1, True),
    (
        6,
        "node_disk_written_bytes_total",
        "The total number of bytes written successfully.",
        SECTOR_BYTES,
        True,
    ),
    (
        7,
        "node_disk_write_time_seconds_total",
        "This is the total number of seconds spent by all writes.",
        0.001,
        True,
    ),
    (8, "node_disk_io_now", "The number of I/Os currently in progress.", 1, False),
    (9, "node_disk_io_time_seconds_total", "Total seconds spent doing I/Os.", 0.001, True),
    (
        10,
        "node_disk_io_time_weighted_seconds_total",
        "The weighted # of seconds spent doing I/Os.",
        0.001,
        True,
    ),
    (
        11,
        "node_disk_discards_completed_total",
        "The total number of discards completed successfully.",
        1,
        True,
    ),
    (12, "node_disk_discards_merged_total", "The total number of discards merged.", 1, True),
    (
        13,
        "node_disk_discarded_sectors_total",
        "The total number of sectors discarded successfully.",
        1,
        True,
    ),
    (
        14,
        "node_disk_discard_time_seconds_total",
        "This is the total number of seconds spent by all discards.",
        0.001,
        True,
    ),
    (
        15,
        "node_disk_flush_requests_total",
        "The total number of flush requests completed successfully",
        1,
        True,
    ),
    (
        16,
        "node_disk_flush_requests_time_seconds_total",
        "This is the total number of seconds spent by all flush requests.",
        0.001,
        True,
    ),
)


def parse_diskstats(text: str) -> dict[str, list[int]]:
    """Parse /proc/diskstats into device -> the numeric fields after the name."""
    devices: dict[str, list[int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 14:
            continue
        devices[parts[2]] = [int(value) for value in parts[3:]]
    return devices


class DiskstatsSource:
    """node_disk_* counters per whole block device."""

    name = "diskstats"
    inline = True  # in-memory procfs: cannot block

    def __init__(self, roots: Roots, ignored: re.Pattern = IGNORED_DEVICES):
        self.path = roots.proc("diskstats")
        self.ignored = ignored

    def collect(self) -> Iterable[Metric]:
        text = read_required(self.path)
        devices = {
            name: values
            for name, values in parse_diskstats(text).items()
            if not self.ignored.match(name)
        }
        for index, name, doc, scale, counter in FIELDS:
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            family = kind(name, doc, labels=["device"])
            for device, values in devices.items():
                if index < len(values):
                    family.add_metric([device], values[index] * scale)
            if family.samples:
                yield family
