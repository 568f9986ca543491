"""CPU time per mode and the kernel counters of /proc/stat (node_exporter's cpu and stat)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporters.runtime import Roots, read_required

# The kernel reports /proc/stat times in USER_HZ ticks (100 on every Linux ABI we run on).
USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
GUEST_MODES = ("user", "nice")  # guest and guest_nice, already included in user/nice


@dataclass
class ProcStat:
    cpus: dict[str, dict[str, float]] = field(default_factory=dict)  # cpu index -> mode -> s
    guest: dict[str, dict[str, float]] = field(default_factory=dict)
    boot_time: float | None = None
    context_switches: float | None = None
    forks: float | None = None
    interrupts: float | None = None
    procs_running: float | None = None
    procs_blocked: float | None = None


def parse_stat(text: str, user_hz: int = USER_HZ) -> ProcStat:
    """Parse /proc/stat: per-CPU times in seconds and the global counters."""
    stat = ProcStat()
    scalars = {
        "btime": "boot_time",
        "ctxt": "context_switches",
        "processes": "forks",
        "procs_running": "procs_running",
        "procs_blocked": "procs_blocked",
    }
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        key = parts[0]
        if key.startswith("cpu") and key != "cpu":
            ticks = [int(value) for value in parts[1:]]
            cpu = key[3:]
            stat.cpus[cpu] = {
                mode: ticks[i] / user_hz for i, mode in enumerate(CPU_MODES) if i < len(ticks)
            }
            stat.guest[cpu] = {
                mode: ticks[8 + i] / user_hz
                for i, mode in enumerate(GUEST_MODES)
                if 8 + i < len(ticks)
            }
        elif key in scalars and len(parts) > 1:
            setattr(stat, scalars[key], float(parts[1]))
        elif key == "intr" and len(parts) > 1:
            stat.interrupts = float(parts[1])
    return stat


class CpuSource:
    """node_cpu_seconds_total{cpu,mode} and node_cpu_guest_seconds_total{cpu,mode}."""

    name = "cpu"
    inline = True  # in-memory procfs: cannot block

    def __init__(self, roots: Roots):
        self.path = roots.proc("stat")

    def collect(self) -> Iterable[Metric]:
        text = read_required(self.path)
        stat = parse_stat(text)
        seconds = CounterMetricFamily(
            "node_cpu_seconds_total",
            "Seconds the CPUs spent in each mode.",
            labels=["cpu", "mode"],
        )
        guest = CounterMetricFamily(
            "node_cpu_guest_seconds_total",
            "Seconds the CPUs spent in guests (VMs) for each mode.",
            labels=["cpu", "mode"],
        )
        for cpu, modes in stat.cpus.items():
            for mode, value in modes.items():
                seconds.add_metric([cpu, mode], value)
            for mode, value in stat.guest[cpu].items():
                guest.add_metric([cpu, mode], value)
        yield seconds
        yield guest


class StatSource:
    """Boot time, context switches, forks, interrupts and runnable/blocked processes."""

    name = "stat"
    inline = True  # in-memory procfs: cannot block

    def __init__(self, roots: Roots):
        self.path = roots.proc("stat")

    def collect(self) -> Iterable[Metric]:
        text = read_required(self.path)
        stat = parse_stat(text)
        families = (
            (
                GaugeMetricFamily,
                "node_boot_time_seconds",
                "Node boot time, in unixtime.",
                stat.boot_time,
            ),
            (
                CounterMetricFamily,
                "node_context_switches_total",
                "Total number of context switches.",
                stat.context_switches,
            ),
            (CounterMetricFamily, "node_forks_total", "Total number of forks.", stat.forks),
            (
                CounterMetricFamily,
                "node_intr_total",
                "Total number of interrupts serviced.",
                stat.interrupts,
            ),
            (
                GaugeMetricFamily,
                "node_procs_running",
                "Number of processes in runnable state.",
                stat.procs_running,
            ),
            (
                GaugeMetricFamily,
                "node_procs_blocked",
                "Number of processes blocked waiting for I/O to complete.",
                stat.procs_blocked,
            ),
        )
        for kind, name, doc, value in families:
            if value is not None:
                yield kind(name, doc, value=value)
