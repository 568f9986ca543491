"""Judge each GPU from what its driver says: the evidence, and the verdict it adds up to.

The exporters read the hardware (NVML, amdsmi, sysfs) into plain readings
(``NvidiaReading``, ``AmdReading``) and hand them, with every XID event as it arrives,
to a ``GpuJudge``; the simulated fleet builds the same readings from its model and asks
the same judge. The judge returns a ``contract.verdicts.GpuVerdict`` per GPU.

Two kinds of evidence, two ways to clear (docs/gpu-health.md, "Clearing"):

- events (an XID, an ECC or NVLink counter that rose): they count for ``window`` seconds
  after they happened (MAC_GPU_EVIDENCE_WINDOW, 1 hour by default), measured on the
  caller's monotonic ``tick`` so that a step of the wall clock (NTP) neither clears nor
  prolongs them. Counters are judged by their increase between two readings, never by
  their value: NVML's volatile counts and AMD's RAS counts reset with the driver, and a
  count carried over from a fault that was repaired says nothing about now;
- conditions (lost from the bus, a remap pending or failed, the driver's recovery
  action, AMD's health flag, a thermal or power slowdown): they count while they last,
  dated from when they were first seen, and clear at the first answer that says they
  ended. A reading's None is no answer ("NVML did not say": the remapped-rows query on a
  MIG-enabled GPU with active instances, say) and leaves the condition as it was.

A piece of evidence keeps its ``at`` (wall time, as people read it) for as long as it
lasts, so an unchanged verdict serves unchanged bytes and the master's sweep skips it
(contract.verdicts.answer_digest).

The judge keeps all this in memory; the exporters save it to a file and hand it back after
a restart on the same boot (node.gpu.evidence_state), all but the XIDs, which the kernel
log keeps (node.gpu.kernel_log).
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
# Seconds an NVML error other than "lost", "reset required" or "no power" (an unknown
# error, a timeout), or an AMD GPU that answers nothing, must last before it is evidence
# (unhealthy: a drain): longer than one scrape at Prometheus' 15 s, so one failed scrape,
# a driver busy for a moment, is not. A GPU that fell off the bus stays that way.
UNREACHABLE_GRACE = 20.0

# NVML's GPU recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, driver r570+):
# value -> (words, state, action). Values from nvidia-ml-py's NVML_GPU_RECOVERY_ACTION_*.
RECOVERY_ACTIONS: dict[int, tuple[str, HealthState, HealthAction]] = {
    1: ("the driver asks for a GPU reset", HealthState.UNHEALTHY, HealthAction.RESET_GPU),
    2: ("the driver asks for a node reboot", HealthState.UNHEALTHY, HealthAction.REBOOT),
    # NVIDIA: terminate every GPU process doing peer-to-peer work, then ask again; jobs
    # must stop, so the node is drained (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt,
    # "Error Recovery and Response Flags").
    3: (
        "the driver asks to stop peer-to-peer (NVLink) work; it then names the next step",
        HealthState.UNHEALTHY,
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


def _unknown_recovery(value: int) -> tuple[str, HealthState, HealthAction]:
    """A recovery action a newer driver asks for, which this MAC does not know: the driver
    says the GPU needs something, so it is worth a look (as an unknown XID), not a drain."""
    return (
        f"the driver asks for recovery action {value}, which this MAC does not know (a "
        "newer driver's): nvidia-smi -q says which",
        HealthState.DEGRADED,
        HealthAction.NONE,
    )


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
    # on many drivers; a timeout; an IRQ problem): NVML's words for it.
    unreachable: str = ""
    reset_required: bool = False  # NVML_ERROR_RESET_REQUIRED: a GPU reset brings it back
    # NVML_ERROR_INSUFFICIENT_POWER: the board's external power is not attached (XID 54's
    # fault, CHECK_MECHANICALS): a reboot does not plug a cable in.
    insufficient_power: bool = False
    # The exporter may not open the GPU (no permission): NVML's words. MAC cannot judge it.
    no_access: str = ""
    # NVML's words when XID events could not be read for several scrapes in a row.
    xids_unread: str = ""
    recovery_action: int | None = None
    ecc_uncorrectable: float | None = None  # volatile total
    ecc_correctable: float | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    nvlink_errors: float | None = None  # CRC, replay and recovery totals, all links
    clock_reasons: int | None = None

    @property
    def out_of_reach(self) -> bool:
        """NVML reaches the GPU no more (``mac_gpu_lost``): its other readings mean nothing."""
        return bool(self.lost or self.reset_required or self.unreachable or self.insufficient_power)


@dataclass
class AmdReading:
    """One AMD GPU (or partition) as amdsmi or sysfs answered this scrape."""

    index: int
    uuid: str = ""
    serial: str = ""
    health_flag: bool | None = None  # AMD's GPU_HEALTH: False is unhealthy
    ecc_uncorrectable: float | None = None  # all blocks
    ecc_correctable: float | None = None
    # It answered before and answers none of its readings now (exporters.amd).
    unreadable: bool = False
    # amdsmi has failed for every GPU for a while and sysfs answers in its place, which
    # numbers the GPUs its own way: the GPU is not judged now (amdsmi's words).
    unjudged: str = ""


class CounterWatch:
    """A counter's increases as events, each remembered for the window."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.rises: deque[tuple[float, float, float]] = deque()  # (tick, when, by how much)

    def update(self, value: float | None, now: float, tick: float, window: float) -> None:
        if value is not None:
            if self.last is not None and value > self.last:
                self.rises.append((tick, now, value - self.last))
            # Lower than before: the driver reset its counters; the new value is the base.
            self.last = value
        while self.rises and self.rises[0][0] <= tick - window:
            self.rises.popleft()

    def total(self) -> float:
        return sum(by for _, _, by in self.rises)

    def latest(self) -> float:
        """When the last rise in the window was seen (wall time)."""
        return self.rises[-1][1] if self.rises else 0.0


@dataclass
class GpuMemory:
    """What the judge keeps of one GPU between scrapes (and, through
    node.gpu.evidence_state, across a restart of its exporter)."""

    xids: dict[int, tuple[float, float]] = field(default_factory=dict)  # xid -> (tick, at)
    since: dict[str, float] = field(default_factory=dict)  # condition -> first seen
    ticks: dict[str, float] = field(default_factory=dict)  # condition -> first seen (tick)
    counters: dict[str, CounterWatch] = field(default_factory=dict)
    recovery: int = 0  # the driver's last answered recovery action

    def counter(self, name: str) -> CounterWatch:
        return self.counters.setdefault(name, CounterWatch())

    def condition(self, name: str, holds: bool | None, now: float) -> float:
        """When the condition was first seen (0 when it does not hold); ``holds`` None
        (no answer) leaves it as it was."""
        if holds is None:
            return self.since.get(name, 0.0)
        if not holds:
            self.since.pop(name, None)
            return 0.0
        return self.since.setdefault(name, now)

    def lasting(
        self, name: str, holds: bool | None, now: float, tick: float, grace: float
    ) -> float:
        """As ``condition``, but only once it has held for ``grace`` seconds (monotonic):
        for evidence a passing hiccup also shows, which must not drain a node."""
        at = self.condition(name, holds, now)
        if not at:
            self.ticks.pop(name, None)
            return 0.0
        return at if tick - self.ticks.setdefault(name, tick) >= grace else 0.0


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
    """The verdict of every GPU of one node, from readings and XID events.

    Every call takes ``now``, the Unix time the evidence is dated with, and ``tick``, a
    monotonic clock's reading (``time.monotonic()``) the windows are measured on; a
    caller whose clock never steps (the simulated fleet) leaves ``tick`` out and ``now``
    serves for both.
    """

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        self.window = window
        self._gpus: dict[int, GpuMemory] = {}

    def _memory(self, index: int) -> GpuMemory:
        return self._gpus.setdefault(index, GpuMemory())

    def memories(self) -> dict[int, GpuMemory]:
        """What the judge keeps of each GPU, by index: for node.gpu.evidence_state to save."""
        return dict(self._gpus)

    def restore(self, index: int, kept: GpuMemory) -> None:
        """What an earlier run of the exporter kept of GPU ``index``, on this boot: its
        counters (their last values, so a rise while the exporter was down counts at the
        first reading), conditions with when they were first seen, the driver's last
        recovery action. Its XIDs stay those the judge has: the kernel log, read back at
        start, is their record (exporters.nvidia), and it knows which a reset repaired."""
        memory = self._memory(index)
        memory.counters, memory.since, memory.ticks = kept.counters, kept.since, kept.ticks
        memory.recovery = kept.recovery

    def xid(self, index: int, code: int, at: float, tick: float | None = None) -> None:
        """An XID event of GPU ``index`` at Unix time ``at`` (monotonic ``tick``)."""
        memory = self._memory(index)
        seen = (at if tick is None else tick, at)
        memory.xids[code] = max(seen, memory.xids.get(code, seen))

    def _xids(self, memory: GpuMemory, tick: float) -> list[Finding]:
        found = []
        for code, (seen, at) in sorted(memory.xids.items()):
            if seen <= tick - self.window:
                del memory.xids[code]
                continue
            entry = xid_catalog.lookup(code)
            found.append(
                Finding(EvidenceSource.XID, str(code), entry.words(), entry.state, entry.action, at)
            )
        return found

    def _ecc(
        self, memory: GpuMemory, now: float, tick: float, uncorrectable, correctable
    ) -> list[Finding]:
        found = []
        rose = memory.counter("ecc_uncorrectable")
        rose.update(uncorrectable, now, tick, self.window)
        if rose.total():
            words = f"{rose.total():.0f} new uncorrectable ECC error(s)"
            found.append(
                Finding(EvidenceSource.ECC, "uncorrectable", words, U, A.RESET_GPU, rose.latest())
            )
        burst = memory.counter("ecc_correctable")
        burst.update(correctable, now, tick, self.window)
        if burst.total() >= CORRECTABLE_BURST:
            words = f"correctable ECC errors rising ({burst.total():.0f} within the window)"
            found.append(
                Finding(EvidenceSource.ECC, "correctable", words, D, A.NONE, burst.latest())
            )
        return found

    def nvidia(self, reading: NvidiaReading, now: float, tick: float | None = None) -> GpuVerdict:
        tick = now if tick is None else tick
        memory = self._memory(reading.index)
        found = self._xids(memory, tick) + _reach(memory, reading, now, tick)
        if at := memory.condition("xids_unread", bool(reading.xids_unread), now):
            words = f"XID events cannot be read ({reading.xids_unread}): a new XID goes unseen"
            found.append(Finding(EvidenceSource.XID, "unreadable", words, D, A.NONE, at))
        if not (reading.out_of_reach or reading.no_access):
            found += self._nvidia_fields(memory, reading, now, tick)
        return _verdict(reading.index, reading.uuid, reading.serial, "nvidia", found)

    def _nvidia_fields(
        self, memory: GpuMemory, reading: NvidiaReading, now: float, tick: float
    ) -> list:
        found = self._ecc(memory, now, tick, reading.ecc_uncorrectable, reading.ecc_correctable)
        if reading.recovery_action is not None:  # unanswered: the last answer stands
            memory.recovery = reading.recovery_action
        value = memory.recovery
        for key in [key for key in memory.since if key.startswith("recovery")]:
            if key != f"recovery{value}":
                del memory.since[key]  # the driver changed its mind: a new condition
        if value:
            words, state, repair = RECOVERY_ACTIONS.get(value, _unknown_recovery(value))
            at = memory.condition(f"recovery{value}", True, now)
            found.append(
                Finding(EvidenceSource.RECOVERY_ACTION, str(value), words, state, repair, at)
            )
        if at := memory.condition("remap_failed", reading.remap_failed, now):
            words = "row remapping failed"
            found.append(
                Finding(EvidenceSource.ROW_REMAP, "failure", words, U, A.INSPECT_HARDWARE, at)
            )
        if at := memory.condition("remap_pending", reading.remap_pending, now):
            words = "a row remap is pending (a GPU reset applies it)"
            found.append(Finding(EvidenceSource.ROW_REMAP, "pending", words, D, A.RESET_GPU, at))
        links = memory.counter("nvlink")
        links.update(reading.nvlink_errors, now, tick, self.window)
        if links.total() >= NVLINK_BURST:
            words = f"NVLink errors rising ({links.total():.0f} within the window)"
            found.append(Finding(EvidenceSource.NVLINK, "errors", words, D, A.NONE, links.latest()))
        reasons = reading.clock_reasons
        for bit, name in SLOWDOWNS.items():
            slowed = None if reasons is None else bool(reasons & bit)
            if at := memory.condition(f"slowdown{bit}", slowed, now):
                words = f"clocks held back: {name}"
                found.append(Finding(EvidenceSource.THROTTLE, f"{bit:#x}", words, D, A.NONE, at))
        return found

    def amd(self, reading: AmdReading, now: float, tick: float | None = None) -> GpuVerdict:
        tick = now if tick is None else tick
        memory = self._memory(reading.index)
        found = self._ecc(memory, now, tick, reading.ecc_uncorrectable, reading.ecc_correctable)
        flag = reading.health_flag
        # A reboot, not a reset: amdgpu adds every error it reads to totals it keeps while
        # it is loaded (amdgpu_ras.c), and it already resets the GPU itself after an
        # uncorrectable error (kernel docs, "RAS Reboot Behavior"); after `amd-smi reset`
        # the flag would still say unhealthy. A reboot starts the totals at 0.
        if at := memory.condition("amd_health", None if flag is None else not flag, now):
            words = "AMD GPU_HEALTH is unhealthy (uncorrectable errors or a fatal error)"
            found.append(Finding(EvidenceSource.AMD_HEALTH, "unhealthy", words, U, A.REBOOT, at))
        # As NVIDIA's unreachable: only once it lasts (UNREACHABLE_GRACE).
        # Unjudged: no reading at all, so it leaves an unreadable GPU as it was.
        unreadable = None if reading.unjudged else reading.unreadable
        if at := memory.lasting("unreadable", unreadable, now, tick, UNREACHABLE_GRACE):
            words = "amdsmi answers none of the GPU's readings (it answered before)"
            found.append(Finding(EvidenceSource.LOST, "unreadable", words, U, A.REBOOT, at))
        # Degraded, as NVIDIA's no_access: nothing is judged, which is no reason to drain,
        # and a verdict the master kept from before would otherwise stand for hours.
        if at := memory.condition("unjudged", bool(reading.unjudged), now):
            words = f"amdsmi fails ({reading.unjudged}); sysfs answers but is not judged"
            found.append(Finding(EvidenceSource.LOST, "unjudged", words, D, A.NONE, at))
        return _verdict(reading.index, reading.uuid, reading.serial, "amd", found)


def _reach(memory: GpuMemory, reading: NvidiaReading, now: float, tick: float) -> list[Finding]:
    """Whether NVML reaches the GPU at all, and if not, why (and whether MAC may open it)."""
    found, lost = [], EvidenceSource.LOST
    if at := memory.condition("lost", reading.lost, now):
        words = "lost from the bus (NVML_ERROR_GPU_IS_LOST)"
        found.append(Finding(lost, "gpu_is_lost", words, U, A.REBOOT, at))
    if at := memory.condition("reset_required", reading.reset_required, now):
        words = "NVML cannot use the GPU until it is reset (NVML_ERROR_RESET_REQUIRED)"
        found.append(Finding(lost, "reset_required", words, U, A.RESET_GPU, at))
    if at := memory.condition("insufficient_power", reading.insufficient_power, now):
        words = "the GPU's external power is not attached (NVML_ERROR_INSUFFICIENT_POWER)"
        found.append(Finding(lost, "insufficient_power", words, U, A.INSPECT_HARDWARE, at))
    # Any other NVML error: the GPU is gone only if it lasts (UNREACHABLE_GRACE), as it does
    # after an XID 79 on drivers that answer Unknown Error from then on.
    unreachable = bool(reading.unreachable) and not reading.reset_required
    if at := memory.lasting("unreachable", unreachable, now, tick, UNREACHABLE_GRACE):
        words = f"NVML cannot reach the GPU ({reading.unreachable})"
        found.append(Finding(lost, "unreachable", words, U, A.REBOOT, at))
    # Degraded, not healthy (nothing was judged) and not unhealthy (a permission is no
    # reason to drain); never left out: the master takes a GPU left out for a missing one.
    if at := memory.condition("no_access", bool(reading.no_access), now):
        words = f"MAC may not open the GPU and cannot judge it ({reading.no_access})"
        found.append(Finding(lost, "no_access", words, D, A.NONE, at))
    return found


def _verdict(index: int, uuid: str, serial: str, vendor: str, found: list[Finding]) -> GpuVerdict:
    gpu = str(index)
    evidence = [
        Evidence(str(f.source), f.code, f.detail, f.state, f.action, f.at, gpu, uuid, serial)
        for f in found
    ]
    return GpuVerdict(gpu, uuid, serial, vendor, tuple(ranked(evidence)))
