"""Values of a simulated node at a time: a pure function of (seed, node address, time) plus faults.

Gauges are smooth waves: a GPU's utilisation swells between about 10 % and 90 % over
2 to 8 hours with a ripple of a few minutes (some nodes sit idle), power and
temperature follow it, memory fills in a sawtooth of 1 to 4 hours (a job loads, runs,
ends). Counters are the integrals of
those waves, worked out in closed form, so a counter never goes back and its rate is
the wave: energy from power, RDMA bytes from a link busy 15-85 % of 400 Gb/s.

Faults come from the same hash: in each 10-minute window a node has a small chance
of one fault (an XID, an uncorrectable ECC error, a GPU fallen off the bus, an RDMA
link flap). Tests add their own with ``inject``. What a fault leaves behind (XID
counts, ECC totals, link_downed, the bytes a flapped link did not carry) is kept in
a small per-node state, advanced lazily when the node is scraped.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field
from enum import StrEnum

WINDOW = 600.0  # seconds; at most one scheduled fault per node per window
LINE_RATE = 400e9 / 8  # bytes per second of a 400 Gb/s port, each way
TAU = 2 * math.pi


class Fault(StrEnum):
    XID = "xid"  # an XID event (its code in Event.xid)
    ECC = "ecc"  # an uncorrectable (double-bit) ECC error, with XID 48 on NVIDIA
    SBE = "sbe"  # a burst of correctable (single-bit) ECC errors
    GPU_LOST = "gpu_lost"  # off the bus (NVML_ERROR_GPU_IS_LOST, XID 79; AMD: gone)
    REMAP_PENDING = "remap_pending"  # a row remap waiting for a GPU reset
    REMAP_FAILURE = "remap_failure"  # row remapping failed
    THERMAL = "thermal"  # hardware thermal slowdown
    NVLINK = "nvlink"  # a burst of NVLink CRC errors
    RECOVERY = "recovery_action"  # the driver's recovery action (its value in Event.xid)
    AMD_HEALTH = "amd_health"  # AMD's GPU_HEALTH flag unhealthy (a fatal error)
    LINK_FLAP = "link_flap"  # an RDMA port down for a while


INF = math.inf
# How long a fault lasts once started: 0 for events (they happen, their traces stay in
# the counters), a span for scheduled conditions; injected conditions last until healed.
DURATION = {
    Fault.XID: 0.0, Fault.ECC: 0.0, Fault.SBE: 0.0, Fault.NVLINK: 0.0,
    Fault.GPU_LOST: 300.0, Fault.LINK_FLAP: 150.0,
    Fault.REMAP_PENDING: INF, Fault.REMAP_FAILURE: INF, Fault.THERMAL: INF,
    Fault.RECOVERY: INF, Fault.AMD_HEALTH: INF,
}  # fmt: skip
# How many errors a burst adds to the counters.
BURST = 100
SCHEDULED_XIDS = (13, 31, 43, 63, 94)  # 48 comes with an ECC error, 79 with a lost GPU


def unit(seed: int, *parts: object) -> tuple[float, ...]:
    """Four floats in [0, 1) from a hash of (seed, parts): cheap, stable across runs."""
    digest = hashlib.blake2b(repr((seed, *parts)).encode(), digest_size=16).digest()
    return tuple(value / 2**32 for value in struct.unpack("<4I", digest))


@dataclass(frozen=True)
class Event:
    fault: Fault
    start: float
    target: int  # the GPU or NIC index
    xid: int = 0  # the XID (XID faults) or the recovery action's value (recovery_action)
    length: float | None = None  # None: DURATION of the fault

    @property
    def end(self) -> float:
        return self.start + (DURATION[self.fault] if self.length is None else self.length)


def scheduled(seed: int, key: str, window: int, rate: float, faults: tuple[Fault, ...]):
    """The fault of this node in this window, or None."""
    if not faults or rate <= 0:
        return None
    chance, kind, where, target = unit(seed, key, "fault", window)
    if chance >= rate:
        return None
    fault = faults[int(kind * len(faults))]
    start = window * WINDOW + where * (WINDOW - DURATION[fault])
    xid = SCHEDULED_XIDS[int(target * 997) % len(SCHEDULED_XIDS)]
    return Event(fault, start, int(target * 8), xid)


@dataclass
class NodeState:
    """What faults left behind on one node; empty dicts until the first fault."""

    window: int | None = None  # the first window whose scheduled fault is not applied yet
    xids: dict[tuple[int, int], int] = field(default_factory=dict)  # (gpu, xid) -> count
    last_xid: dict[int, int] = field(default_factory=dict)
    ecc: dict[int, int] = field(default_factory=dict)  # gpu -> uncorrectable errors
    sbe: dict[int, int] = field(default_factory=dict)  # gpu -> correctable errors
    nvlink: dict[int, int] = field(default_factory=dict)  # gpu -> NVLink CRC errors
    downed: dict[int, int] = field(default_factory=dict)  # nic -> link_downed
    missed: dict[int, float] = field(default_factory=dict)  # nic -> bytes not carried
    injected: list[Event] = field(default_factory=list)
    applied: set[Event] = field(default_factory=set)
    healed: dict[Event, float] = field(default_factory=dict)  # ended early, at this time
    boots: int = 0  # reboots since the fleet started

    def active(self, event: Event, now: float) -> bool:
        return event.start <= now < min(event.end, self.healed.get(event, INF))


@dataclass(frozen=True)
class Wave:
    """level + the sum of amplitude * sin(omega t + phase) terms, and its integral from 0."""

    level: float
    terms: tuple[tuple[float, float, float], ...]  # (amplitude, omega, phase)

    def at(self, t: float) -> float:
        return self.level + sum(a * math.sin(w * t + p) for a, w, p in self.terms)

    def integral(self, t: float) -> float:
        return self.level * t + sum(
            a / w * (math.cos(p) - math.cos(w * t + p)) for a, w, p in self.terms
        )


def gpu_wave(seed: int, key: str, gpu: int, idle: bool) -> Wave:
    """A job's swell over 2-8 hours with a ripple of a few minutes: 11-93 %."""
    period, phase, ripple, ripple_phase = unit(seed, key, "gpu")
    shift = 0.4 * gpu  # the GPUs of one job move together, a little apart
    if idle:
        return Wave(2.0, ((1.5, TAU / 600, phase * TAU + shift),))
    return Wave(
        52.0,
        (
            (35.0, TAU / (7200 + 21600 * period), phase * TAU + 0.1 * shift),
            (6.0, TAU / (240 + 480 * ripple), ripple_phase * TAU + shift),
        ),
    )


def nic_wave(seed: int, key: str, nic: int, direction: int, idle: bool) -> Wave:
    """The share of the line rate in use: 15-85 % (2-4 % on an idle node)."""
    period, phase, ripple, ripple_phase = unit(seed, key, "nic", nic, direction)
    busy = 0.03 if idle else 0.5
    return Wave(
        busy,
        (
            (busy * 0.6, TAU / (3600 + 14400 * period), phase * TAU),
            (busy * 0.1, TAU / (180 + 240 * ripple), ripple_phase * TAU),
        ),
    )


def sawtooth(t: float, period: float, offset: float) -> float:
    return ((t + offset) / period) % 1.0
