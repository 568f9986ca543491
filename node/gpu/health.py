"""Judge each GPU from what its driver says: the evidence, and the verdict it adds up to.

The exporters read the hardware (NVML, amdsmi, sysfs) into plain readings
(``NvidiaReading``, ``AmdReading``) and hand them, with every XID event as it arrives,
to a ``GpuJudge``; the simulated fleet builds the same readings from its model and asks
the same judge. The judge returns a ``contract.verdicts.GpuVerdict`` per GPU.

Two kinds of evidence, two ways to clear (docs/gpu-health.md, "Clearing"):

- events (an XID, an ECC or NVLink counter that rose): they count for ``window`` seconds
  after they happened (MAC_GPU_EVIDENCE_WINDOW, 1 hour by default). Counters are judged
  by their increase between two readings, never by their value: NVML's volatile counts
  and AMD's RAS counts reset with the driver, and a count carried over from a fault
  that was repaired says nothing about now;
- conditions (lost from the bus, a remap pending or failed, the driver's recovery
  action, AMD's health flag, a thermal or power slowdown): they count while they last,
  dated from when they were first seen, and clear the moment they end.

A piece of evidence keeps its ``at`` for as long as it lasts, so an unchanged verdict
serves unchanged bytes and the master's sweep skips it (contract.verdicts.answer_digest).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from contract import settings
from contract.verdicts import (
    Evidence,
    EvidenceSource,
    GpuVerdict,
    HealthAction,
    HealthState,
    ranked,
)
from node.gpu import xid_catalog

A = HealthAction

# Seconds an event counts: declared in contract.settings.agent, from 1 s (a window under
# the master's probe interval may clear evidence before the master reads it: the docs say
# so) to a week.
WINDOW_SETTING = "MAC_GPU_EVIDENCE_WINDOW"
DEFAULT_WINDOW: float = settings.setting(WINDOW_SETTING).default
# Correctable errors are routine one at a time; this many within the window is a trend.
CORRECTABLE_BURST = 10
NVLINK_BURST = 10  # NVLink CRC, replay and recovery errors within the window

# NVML's GPU recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, driver r570+):
# value -> (words, state, action). Values from nvidia-ml-py's NVML_GPU_RECOVERY_ACTION_*.
RECOVERY_ACTIONS: dict[int, tuple[str, HealthState, HealthAction]] = {
    1: ("the driver asks for a GPU reset", HealthState.UNHEALTHY, HealthAction.RESET_GPU),
    2: ("the driver asks for a node reboot", HealthState.UNHEALTHY, HealthAction.REBOOT),
    3: (
        "the driver asks to drain peer-to-peer (NVLink) work, then reset",
        HealthState.DEGRADED,
        HealthAction.RESET_GPU,
    ),
    4: (
        "the driver asks to drain the GPU and reset it",
        HealthState.UNHEALTHY,
        HealthAction.RESET_GPU,
    ),
    5: ("the driver asks to recover the IMEX domain", HealthState.DEGRADED, HealthAction.NONE),
    6: ("the driver asks for a PCIe bus reset", HealthState.UNHEALTHY, HealthAction.RESET_GPU),
    7: ("the driver asks for a system reboot", HealthState.UNHEALTHY, HealthAction.REBOOT),
}

# Clock event (throttle) reasons that mean the GPU is being slowed to protect itself; a
# power cap (0x4) or idle clocks are normal. nvmlClocksEventReason* bits.
SLOWDOWNS = {
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake slowdown",
}


@dataclass
class NvidiaReading:
    """One NVIDIA GPU as NVML answered this scrape (None: NVML did not say)."""

    index: int
    uuid: str = ""
    serial: str = ""
    lost: bool = False
    # NVML cannot reach the GPU for another reason (an unknown error, as after an XID 79
    # on many drivers; a reset required; an IRQ or power problem): NVML's words for it.
    unreachable: str = ""
    reset_required: bool = False  # NVML_ERROR_RESET_REQUIRED: a GPU reset brings it back
    recovery_action: int | None = None
    ecc_uncorrectable: float | None = None  # volatile total
    ecc_correctable: float | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    nvlink_errors: float | None = None  # CRC, replay and recovery totals, all links
    clock_reasons: int | None = None


@dataclass
class AmdReading:
    """One AMD GPU (or partition) as amdsmi or sysfs answered this scrape."""

    index: int
    uuid: str = ""
    serial: str = ""
    health_flag: bool | None = None  # AMD's GPU_HEALTH: False is unhealthy
    ecc_uncorrectable: float | None = None  # all blocks
    ecc_correctable: float | None = None


class CounterWatch:
    """A counter's increases as events, each remembered for the window."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.rises: deque[tuple[float, float]] = deque()  # (when, by how much)

    def update(self, value: float | None, now: float, window: float) -> None:
        if value is not None:
            if self.last is not None and value > self.last:
                self.rises.append((now, value - self.last))
            # Lower than before: the driver reset its counters; the new value is the base.
            self.last = value
        while self.rises and self.rises[0][0] <= now - window:
            self.rises.popleft()

    def total(self) -> float:
        return sum(by for _, by in self.rises)

    def latest(self) -> float:
        return self.rises[-1][0] if self.rises else 0.0


@dataclass
class _GpuMemory:
    """What the judge keeps of one GPU between scrapes."""

    xids: dict[int, float] = field(default_factory=dict)  # xid -> latest time within window
    since: dict[str, float] = field(default_factory=dict)  # condition -> first seen
    counters: dict[str, CounterWatch] = field(default_factory=dict)

    def counter(self, name: str) -> CounterWatch:
        return self.counters.setdefault(name, CounterWatch())

    def condition(self, name: str, holds: bool, now: float) -> float:
        """When the condition was first seen (0 when it does not hold now)."""
        if not holds:
            self.since.pop(name, None)
            return 0.0
        return self.since.setdefault(name, now)


class Finding(NamedTuple):
    """A piece of evidence before it is tied to its GPU."""

    source: EvidenceSource
    code: str
    detail: str
    state: HealthState
    action: HealthAction
    at: float


U, D = HealthState.UNHEALTHY, HealthState.DEGRADED


class GpuJudge:
    """The verdict of every GPU of one node, from readings and XID events."""

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        self.window = window
        self._gpus: dict[int, _GpuMemory] = {}

    def _memory(self, index: int) -> _GpuMemory:
        return self._gpus.setdefault(index, _GpuMemory())

    def xid(self, index: int, code: int, at: float) -> None:
        """An XID event of GPU ``index`` at Unix time ``at``."""
        memory = self._memory(index)
        memory.xids[code] = max(at, memory.xids.get(code, 0.0))

    def _xids(self, memory: _GpuMemory, now: float) -> list[Finding]:
        found = []
        for code, at in sorted(memory.xids.items()):
            if at <= now - self.window:
                del memory.xids[code]
                continue
            entry = xid_catalog.lookup(code)
            found.append(
                Finding(EvidenceSource.XID, str(code), entry.words(), entry.state, entry.action, at)
            )
        return found

    def _ecc(self, memory: _GpuMemory, now: float, uncorrectable, correctable) -> list[Finding]:
        found = []
        rose = memory.counter("ecc_uncorrectable")
        rose.update(uncorrectable, now, self.window)
        if rose.total():
            words = f"{rose.total():.0f} new uncorrectable ECC error(s)"
            found.append(
                Finding(EvidenceSource.ECC, "uncorrectable", words, U, A.RESET_GPU, rose.latest())
            )
        burst = memory.counter("ecc_correctable")
        burst.update(correctable, now, self.window)
        if burst.total() >= CORRECTABLE_BURST:
            words = f"correctable ECC errors rising ({burst.total():.0f} within the window)"
            found.append(
                Finding(EvidenceSource.ECC, "correctable", words, D, A.NONE, burst.latest())
            )
        return found

    def nvidia(self, reading: NvidiaReading, now: float) -> GpuVerdict:
        memory = self._memory(reading.index)
        found = self._xids(memory, now)
        if at := memory.condition("lost", reading.lost, now):
            words = "lost from the bus (NVML_ERROR_GPU_IS_LOST)"
            found.append(Finding(EvidenceSource.LOST, "gpu_is_lost", words, U, A.REBOOT, at))
        if at := memory.condition("reset_required", reading.reset_required, now):
            words = "NVML cannot use the GPU until it is reset (NVML_ERROR_RESET_REQUIRED)"
            found.append(Finding(EvidenceSource.LOST, "reset_required", words, U, A.RESET_GPU, at))
        unreachable = bool(reading.unreachable) and not reading.reset_required
        if at := memory.condition("unreachable", unreachable, now):
            words = f"NVML cannot reach the GPU ({reading.unreachable})"
            found.append(Finding(EvidenceSource.LOST, "unreachable", words, U, A.REBOOT, at))
        if not (reading.lost or reading.reset_required or reading.unreachable):
            found += self._nvidia_fields(memory, reading, now)
        return _verdict(reading.index, reading.uuid, reading.serial, "nvidia", found)

    def _nvidia_fields(self, memory: _GpuMemory, reading: NvidiaReading, now: float) -> list:
        found = self._ecc(memory, now, reading.ecc_uncorrectable, reading.ecc_correctable)
        value = reading.recovery_action or 0
        for key in [key for key in memory.since if key.startswith("recovery")]:
            if key != f"recovery{value}":
                del memory.since[key]  # the driver changed its mind: a new condition
        if value in RECOVERY_ACTIONS:
            words, state, repair = RECOVERY_ACTIONS[value]
            at = memory.condition(f"recovery{value}", True, now)
            found.append(
                Finding(EvidenceSource.RECOVERY_ACTION, str(value), words, state, repair, at)
            )
        if at := memory.condition("remap_failed", bool(reading.remap_failed), now):
            words = "row remapping failed"
            found.append(
                Finding(EvidenceSource.ROW_REMAP, "failure", words, U, A.INSPECT_HARDWARE, at)
            )
        if at := memory.condition("remap_pending", bool(reading.remap_pending), now):
            words = "a row remap is pending (a GPU reset applies it)"
            found.append(Finding(EvidenceSource.ROW_REMAP, "pending", words, D, A.RESET_GPU, at))
        links = memory.counter("nvlink")
        links.update(reading.nvlink_errors, now, self.window)
        if links.total() >= NVLINK_BURST:
            words = f"NVLink errors rising ({links.total():.0f} within the window)"
            found.append(Finding(EvidenceSource.NVLINK, "errors", words, D, A.NONE, links.latest()))
        for bit, name in SLOWDOWNS.items():
            slowed = reading.clock_reasons is not None and bool(reading.clock_reasons & bit)
            if at := memory.condition(f"slowdown{bit}", slowed, now):
                words = f"clocks held back: {name}"
                found.append(Finding(EvidenceSource.THROTTLE, f"{bit:#x}", words, D, A.NONE, at))
        return found

    def amd(self, reading: AmdReading, now: float) -> GpuVerdict:
        memory = self._memory(reading.index)
        found = self._ecc(memory, now, reading.ecc_uncorrectable, reading.ecc_correctable)
        if at := memory.condition("amd_health", reading.health_flag is False, now):
            words = "AMD GPU_HEALTH is unhealthy (uncorrectable errors or a fatal error)"
            found.append(Finding(EvidenceSource.AMD_HEALTH, "unhealthy", words, U, A.RESET_GPU, at))
        return _verdict(reading.index, reading.uuid, reading.serial, "amd", found)


def _verdict(index: int, uuid: str, serial: str, vendor: str, found: list[Finding]) -> GpuVerdict:
    gpu = str(index)
    evidence = [
        Evidence(str(f.source), f.code, f.detail, f.state, f.action, f.at, gpu, uuid, serial)
        for f in found
    ]
    return GpuVerdict(gpu, uuid, serial, vendor, tuple(ranked(evidence)))
