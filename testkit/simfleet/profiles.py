"""Hardware profiles of simulated nodes, the fleet's mix of them, and each node's pages.

A profile names what a node is (GPUs, RDMA NICs) and which agent services it runs.
Its /metrics pages come from templates made by MAC's real exporters over the fakes
(testkit.simfleet.hardware), built on first use and shared by every node of the
profile; a node renders a page per scrape from (seed, its address, the time) through
testkit.simfleet.model, so 10,000 nodes cost one template each plus a small state.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from contract.services import BY_NAME
from contract.verdicts import VERDICT_METRICS
from node.gpu.health import DEFAULT_WINDOW, AmdReading, NvidiaReading
from testkit.simfleet import hardware
from testkit.simfleet.hardware import BNXT_RE, GPUBOOST, MLX5, XIDS, NicKind, nic_names
from testkit.simfleet.health import SimVerdicts
from testkit.simfleet.model import (
    BURST,
    LINE_RATE,
    WINDOW,
    Event,
    Fault,
    NodeState,
    gpu_wave,
    nic_wave,
    sawtooth,
    scheduled,
    unit,
)
from testkit.simfleet.template import Key, Template

H200_FB_MIB = 137_140  # FB_USED + FB_FREE of one H200 (NVML's 143.7 GB less the reserved part)
MI300X_VRAM_MB = 196_592
HOST_CPUS = 8
HOST_MEMORY = 2 * 1024**4
FAULT_RATE = 0.02  # chance of a fault per node per 10-minute window
EPOCH = 1_781_000_000.0  # Unix time of the clock's 0 when a test's clock has no wall time
SW_POWER_CAP, HW_THERMAL_SLOWDOWN = 0x4, 0x40  # NVML clock event reasons


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    gpu_vendor: str  # the registration's gpu_vendor: nvidia, amd or none
    gpu_model: str
    gpu_count: int
    nic: NicKind | None
    nic_count: int
    services: tuple[str, ...]
    faults: tuple[Fault, ...] = ()
    gpu_service: str = ""

    @property
    def nic_owners(self) -> dict[str, int]:
        """Verbs device and interface names -> NIC index, for the templates' owner labels."""
        owners: dict[str, int] = {}
        if self.nic is not None:
            for index, (ibdev, iface) in enumerate(nic_names(self.nic, self.nic_count)):
                if ibdev:
                    owners[ibdev] = index
                owners[iface] = index
        return owners


_AGENT = ("sys-exporter", "sys-manager")
PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile(
            "nvidia", "8x NVIDIA H200 (NVLink), 8x ConnectX-7 (mlx5) RoCE 400 Gb/s",
            "nvidia", "NVIDIA H200", 8, MLX5, 8,
            (*_AGENT, "dcgm-exporter", "nic-exporter"),
            (Fault.XID, Fault.ECC, Fault.GPU_LOST, Fault.LINK_FLAP), "dcgm-exporter",
        ),
        Profile(
            "amd", "8x AMD Instinct MI300X, 8x Broadcom Thor2 (bnxt_re) RoCE 400 Gb/s",
            "amd", "AMD Instinct MI300X", 8, BNXT_RE, 8,
            (*_AGENT, "rocm-exporter", "nic-exporter"),
            (Fault.ECC, Fault.GPU_LOST, Fault.LINK_FLAP), "rocm-exporter",
        ),
        Profile(
            "mangoboost", "8x AMD Instinct MI300X, 2x MangoBoost GPUBoost RDMA NICs",
            "amd", "AMD Instinct MI300X", 8, GPUBOOST, 2,
            (*_AGENT, "rocm-exporter", "nic-exporter", "mango-sdk-agent"),
            (Fault.ECC, Fault.GPU_LOST), "rocm-exporter",
        ),
        Profile("cpu", "CPU only", "none", "", 0, None, 0, _AGENT),
    )
}  # fmt: skip
DEFAULT_MIX = "nvidia=55,amd=30,mangoboost=5,cpu=10"


def parse_mix(text: str) -> dict[str, int]:
    """``nvidia=60,amd=30,cpu=10`` -> {profile: weight}; ValueError naming what is wrong."""
    mix: dict[str, int] = {}
    for part in text.split(","):
        name, sep, weight = part.strip().partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"--profiles: {part.strip()!r} is not NAME=WEIGHT")
        if name not in PROFILES:
            raise ValueError(f"--profiles: unknown profile {name!r}; known: {', '.join(PROFILES)}")
        if name in mix:
            raise ValueError(f"--profiles: {name!r} given twice")
        try:
            mix[name] = int(weight)
        except ValueError:
            raise ValueError(
                f"--profiles: weight of {name!r} is not a whole number: {weight!r}"
            ) from None
        if mix[name] < 0:
            raise ValueError(f"--profiles: weight of {name!r} is negative")
    if not sum(mix.values()):
        raise ValueError("--profiles: the weights add up to 0")
    return mix


def assign(count: int, mix: dict[str, int]) -> list[Profile]:
    """``count`` profiles in proportion to ``mix`` (largest remainders), interleaved."""
    total = sum(mix.values())
    shares = {name: count * weight / total for name, weight in mix.items()}
    counts = {name: int(share) for name, share in shares.items()}
    by_remainder = sorted(mix, key=lambda name: counts[name] - shares[name])
    for name in by_remainder[: count - sum(counts.values())]:
        counts[name] += 1
    # Spread each profile evenly over the addresses, so any slice of the fleet is mixed.
    slots = sorted(
        ((index + 0.5) / counts[name], name) for name in mix for index in range(counts[name])
    )
    return [PROFILES[name] for _, name in slots]


@functools.cache
def template(profile: str, service: str) -> Template | None:
    """The shared template of one service of one profile; None where the service has no page."""
    spec = PROFILES[profile]
    if service == "sys-exporter":
        text = hardware.host(HOST_CPUS, HOST_MEMORY)
    elif service == "dcgm-exporter":
        text = hardware.nvidia_gpus(spec.gpu_count)
    elif service == "rocm-exporter":
        text = hardware.amd_gpus(spec.gpu_count)
    elif service == "nic-exporter" and spec.nic is not None:
        text = hardware.nics(spec.nic, spec.nic_count)
    else:
        return None
    return Template(text, spec.nic_owners, drop=VERDICT_METRICS)


@functools.cache
def registration_nics(profile: str) -> tuple[dict, ...]:
    spec = PROFILES[profile]
    if spec.nic is None:
        return ()
    return tuple(hardware.registration_nics(spec.nic, spec.nic_count))


@dataclass(eq=False)
class SimHardware:
    """One node's hardware: its profile, its seed-derived character and its fault state."""

    profile: Profile
    seed: int
    key: str  # the node's address: the same node gets the same values in every run
    clock: Callable[[], float]
    fault_rate: float = FAULT_RATE  # 0: only injected faults
    state: NodeState = field(default_factory=NodeState)
    window: float = DEFAULT_WINDOW  # how long GPU evidence counts (MAC_GPU_EVIDENCE_WINDOW)
    epoch: float = EPOCH  # Unix time when clock() was 0

    def __post_init__(self) -> None:
        idle, boot, memory, _ = unit(self.seed, self.key, "node")
        self.idle = idle < 0.15  # some nodes wait for work
        self.boot = 3600 + boot * 5 * 86400  # seconds since boot when the fleet starts
        self.memory_period = 3600 + memory * 10_800
        self.memory_offset = boot * 10_000
        self.token = hashlib.blake2b(f"{self.seed}:{self.key}".encode(), digest_size=4).hexdigest()
        self.verdicts = (
            SimVerdicts(self.profile.gpu_vendor, self.profile.gpu_count, self.token, self.window)
            if self.profile.gpu_count
            else None
        )

    @property
    def boot_id(self) -> str:
        """The kernel's boot_id as this node's exporters report it: new at each reboot."""
        return f"{self.token}-0000-4000-8000-{self.state.boots:012x}"

    def inject(
        self,
        fault: Fault | str,
        target: int = 0,
        xid: int = 0,
        after: float = 0,
        length: float | None = None,
    ) -> Event:
        """A fault starting ``after`` seconds from now on GPU or NIC ``target``, lasting
        ``length`` seconds (None: the fault's own DURATION; conditions then last until healed)."""
        event = Event(Fault(fault), self.clock() + after, target, xid, length)
        self.state.injected.append(event)
        return event

    def heal(self) -> list[Event]:
        """End every fault still going on now (a lost GPU is back, a condition is gone);
        what past events left (XIDs, error counts) clears as the evidence window passes."""
        now = self.clock()
        ended = [e for e in self.state.injected if self.state.active(e, now)]
        current = scheduled(
            self.seed, self.key, int(now // WINDOW), self.fault_rate, self.profile.faults
        )
        if current is not None and self.state.active(current, now):
            ended.append(current)
        for event in ended:
            self.state.healed[event] = now
        return ended

    def reboot(self) -> None:
        """A reboot: a new boot_id, every fault over, the driver's counters and the
        exporters' memory (XIDs) start again."""
        self.heal()
        state = self.state
        state.boots += 1
        state.xids.clear()
        state.last_xid.clear()
        for counts in (state.ecc, state.sbe, state.nvlink):
            counts.clear()
        if self.verdicts is not None:
            self.verdicts.reboot()

    # -- faults ------------------------------------------------------------------------

    def _events_until(self, now: float) -> list[Event]:
        """Scheduled faults of the windows not applied yet, plus injected ones, started by now."""
        state, events = self.state, []
        if state.window is None:  # faults before the first scrape left nothing behind
            state.window = int(now // WINDOW)
        while state.window <= now // WINDOW:
            event = scheduled(
                self.seed, self.key, state.window, self.fault_rate, self.profile.faults
            )
            if event is not None and event.start > now:
                break  # this window's fault is still to come
            if event is not None:
                events.append(event)
            state.window += 1
        events.extend(e for e in state.injected if e.start <= now and e not in state.applied)
        return events

    def _advance(self, now: float) -> list[Event]:
        """Apply what started by now; return the faults active now."""
        state = self.state
        for event in self._events_until(now):
            state.applied.add(event)
            gpu = event.target % max(self.profile.gpu_count, 1)
            if event.fault is Fault.XID:
                self._xid(gpu, event.xid, event.start)
            elif event.fault is Fault.ECC:
                state.ecc[gpu] = state.ecc.get(gpu, 0) + 1
                self._xid(gpu, 48, event.start)
            elif event.fault is Fault.SBE:
                state.sbe[gpu] = state.sbe.get(gpu, 0) + BURST
            elif event.fault is Fault.NVLINK:
                state.nvlink[gpu] = state.nvlink.get(gpu, 0) + BURST
            elif event.fault is Fault.GPU_LOST:
                self._xid(gpu, 79, event.start)
            elif event.fault is Fault.LINK_FLAP and self.profile.nic_count:
                nic = event.target % self.profile.nic_count
                state.downed[nic] = state.downed.get(nic, 0) + 1
                for direction in (0, 1):
                    lost = self._raw_bytes(nic, direction, event.end) - self._raw_bytes(
                        nic, direction, event.start
                    )
                    state.missed[nic * 2 + direction] = (
                        state.missed.get(nic * 2 + direction, 0) + lost
                    )
        current = scheduled(
            self.seed, self.key, int(now // WINDOW), self.fault_rate, self.profile.faults
        )
        candidates = [*state.injected, *([current] if current else [])]
        return [e for e in candidates if state.active(e, now)]

    def _xid(self, gpu: int, xid: int, at: float) -> None:
        if self.profile.gpu_vendor != "nvidia":
            return
        self.state.xids[(gpu, xid)] = self.state.xids.get((gpu, xid), 0) + 1
        self.state.last_xid[gpu] = xid
        if self.verdicts is not None:
            self.verdicts.xid(gpu, xid, self.epoch + at)

    # -- GPU verdicts ------------------------------------------------------------------

    def verdict_page(self, hostname: str) -> bytes:
        """The verdict lines of this node's GPU exporter now (the sweep's probe query)."""
        if self.verdicts is None:
            return b""
        now = self.clock()
        active = self._advance(now)
        readings = self._readings(active)
        return self.verdicts.page(hostname, readings, self.boot_id, self.epoch + now)

    def _readings(self, active: list[Event]) -> list[NvidiaReading | AmdReading]:
        """What each GPU's driver would answer now; a lost AMD GPU is not read at all."""
        state, lost = self.state, self._lost_gpus(active)
        going = {(e.fault, e.target % max(self.profile.gpu_count, 1)): e for e in active}
        readings: list[NvidiaReading | AmdReading] = []
        for gpu in range(self.profile.gpu_count):
            uuid, serial = self.verdicts.identity(gpu)
            if self.profile.gpu_vendor == "nvidia":
                recovery = going.get((Fault.RECOVERY, gpu))
                thermal = (Fault.THERMAL, gpu) in going
                readings.append(
                    NvidiaReading(
                        gpu, uuid, serial, lost=gpu in lost,
                        recovery_action=recovery.xid if recovery else 0,
                        ecc_uncorrectable=state.ecc.get(gpu, 0),
                        ecc_correctable=2 + state.sbe.get(gpu, 0),
                        remap_pending=(Fault.REMAP_PENDING, gpu) in going,
                        remap_failed=(Fault.REMAP_FAILURE, gpu) in going,
                        nvlink_errors=state.nvlink.get(gpu, 0),
                        clock_reasons=SW_POWER_CAP | (HW_THERMAL_SLOWDOWN if thermal else 0),
                    )
                )  # fmt: skip
            elif gpu not in lost:
                ecc = state.ecc.get(gpu, 0)
                flag = not ecc and (Fault.AMD_HEALTH, gpu) not in going
                readings.append(
                    AmdReading(
                        gpu, uuid, serial, health_flag=flag, ecc_uncorrectable=ecc,
                        ecc_correctable=3 + state.sbe.get(gpu, 0),
                    )
                )  # fmt: skip
        return readings

    # -- values ------------------------------------------------------------------------

    def _raw_bytes(self, nic: int, direction: int, now: float) -> float:
        wave = nic_wave(self.seed, self.key, nic, direction, self.idle)
        return LINE_RATE * wave.integral(now + self.boot)

    def page(self, service: str, hostname: str) -> bytes | None:
        """This node's /metrics page of ``service`` now; None where the service has none."""
        shared = template(self.profile.name, service)
        if shared is None:
            return None
        now = self.clock()
        active = self._advance(now)
        values: dict[Key, float | None] = {}
        for key in shared.keys:
            if key[0] == "mac_exporter_collector_last_success_timestamp_seconds":
                values[key] = time.time()
        hidden: set = set()
        if service == "sys-exporter":
            self._host(values, now)
        elif service == "dcgm-exporter":
            hidden = self._nvidia(values, now, active)
        elif service == "rocm-exporter":
            hidden = self._amd(values, now, active)
        elif service == "nic-exporter":
            self._nics(values, now, active)
        page = shared.render(hostname, values, hidden, self.token)
        if service in ("dcgm-exporter", "rocm-exporter") and self.verdicts is not None:
            readings = self._readings(active)
            page += self.verdicts.page(hostname, readings, self.boot_id, self.epoch + now)
        return page

    def _utilisation(self, gpu: int, now: float) -> tuple[float, object]:
        wave = gpu_wave(self.seed, self.key, gpu, self.idle)
        return wave.at(now), wave

    def _memory_fraction(self, now: float) -> float:
        if self.idle:
            return 0.004
        return 0.05 + 0.9 * sawtooth(now, self.memory_period, self.memory_offset)

    def _lost_gpus(self, active: list[Event]) -> set[int]:
        count = max(self.profile.gpu_count, 1)
        return {e.target % count for e in active if e.fault is Fault.GPU_LOST}

    def _nvidia(self, values: dict, now: float, active: list[Event]) -> set:
        lost = self._lost_gpus(active)
        state = self.state
        count = max(self.profile.gpu_count, 1)
        slowed = {e.target % count for e in active if e.fault is Fault.THERMAL}
        failed = {e.target % count for e in active if e.fault is Fault.REMAP_FAILURE}
        for gpu in range(self.profile.gpu_count):
            owner = ("gpu", gpu)
            values[("mac_gpu_lost", owner, "")] = 1.0 if gpu in lost else 0.0
            if state.last_xid.get(gpu) == 79 and gpu not in lost:
                del state.last_xid[gpu]  # back after a reset: a fresh exporter knows no XID
            values[("DCGM_FI_DEV_XID_ERRORS", owner, "")] = state.last_xid.get(gpu, 0)
            for xid in XIDS:
                values[("DCGM_EXP_XID_ERRORS_COUNT", owner, str(xid))] = state.xids.get((gpu, xid))
            if gpu in lost:
                continue
            util, wave = self._utilisation(gpu, now)
            used = int(H200_FB_MIB * self._memory_fraction(now))
            since_boot = now + self.boot
            for name, value in (
                ("DCGM_FI_DEV_GPU_UTIL", round(util)),
                ("DCGM_FI_DEV_MEM_COPY_UTIL", round(util * 0.45)),
                ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", util / 100 * 0.98),
                ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", util / 100 * 0.65),
                ("DCGM_FI_PROF_DRAM_ACTIVE", util / 100 * 0.5),
                ("DCGM_FI_DEV_POWER_USAGE", 90 + 6.1 * util),
                ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                 1000 * (90 * since_boot + 6.1 * wave.integral(since_boot))),
                ("DCGM_FI_DEV_GPU_TEMP", round(30 + 0.5 * util)),
                ("DCGM_FI_DEV_MEMORY_TEMP", round(28 + 0.45 * util)),
                ("DCGM_FI_DEV_SM_CLOCK", 1980 if util > 5 else 345),
                ("DCGM_FI_DEV_FB_USED", used),
                ("DCGM_FI_DEV_FB_FREE", H200_FB_MIB - used),
                ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", state.ecc.get(gpu, 0)),
                ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 2 + state.sbe.get(gpu, 0)),
                ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                 SW_POWER_CAP | HW_THERMAL_SLOWDOWN * (gpu in slowed)),
                ("DCGM_FI_DEV_ROW_REMAP_FAILURE", float(gpu in failed)),
            ):  # fmt: skip
                values[(name, owner, "")] = value
        return {("gpu", gpu) for gpu in lost}

    def _amd(self, values: dict, now: float, active: list[Event]) -> set:
        lost = self._lost_gpus(active)
        values[("gpu_nodes_total", None, "")] = self.profile.gpu_count - len(lost)
        for gpu in range(self.profile.gpu_count):
            if gpu in lost:
                continue
            owner = ("gpu", gpu)
            util, wave = self._utilisation(gpu, now)
            used = int(MI300X_VRAM_MB * self._memory_fraction(now))
            since_boot = now + self.boot
            ecc = self.state.ecc.get(gpu, 0)
            for name, value in (
                ("gpu_gfx_activity", round(util)),
                ("gpu_umc_activity", round(util * 0.4)),
                ("gpu_used_vram", used),
                ("gpu_free_vram", MI300X_VRAM_MB - used),
                ("gpu_junction_temperature", round(38 + 0.55 * util)),
                ("gpu_memory_temperature", round(34 + 0.4 * util)),
                ("gpu_power_usage", 140 + 6.1 * util),
                ("gpu_package_power", 140 + 6.1 * util),
                ("gpu_energy_consumed", 1e6 * (140 * since_boot + 6.1 * wave.integral(since_boot))),
                ("gpu_ecc_uncorrect_total", ecc),
                ("gpu_ecc_uncorrect_umc", ecc),
            ):  # fmt: skip
                values[(name, owner, "")] = value
        return {("gpu", gpu) for gpu in lost}

    def _nics(self, values: dict, now: float, active: list[Event]) -> None:
        count = self.profile.nic_count
        flapping = {e.target % count: e for e in active if e.fault is Fault.LINK_FLAP}
        for nic in range(count):
            owner = ("nic", nic)
            flap = flapping.get(nic)
            for direction, names in enumerate(
                (
                    ("rdma_rx_bytes_total", "node_infiniband_port_data_received_bytes_total"),
                    ("rdma_tx_bytes_total", "node_infiniband_port_data_transmitted_bytes_total"),
                )
            ):
                missed = self.state.missed.get(nic * 2 + direction, 0.0)
                if flap is None:
                    carried = self._raw_bytes(nic, direction, now) - missed
                else:  # frozen where the link went down; this flap's loss is already counted
                    this = self._raw_bytes(nic, direction, flap.end) - self._raw_bytes(
                        nic, direction, flap.start
                    )
                    carried = self._raw_bytes(nic, direction, flap.start) - (missed - this)
                for name in names:
                    values[(name, owner, "")] = float(int(carried))
            state_id = 1 if flap else 4
            values[("rdma_link_up", owner, "")] = 0 if flap else 1
            values[("rdma_link_state_id", owner, "")] = state_id
            values[("node_infiniband_state_id", owner, "")] = state_id
            values[("node_infiniband_physical_state_id", owner, "")] = 2 if flap else 5
            values[("node_infiniband_link_downed_total", owner, "")] = self.state.downed.get(nic, 0)

    def _host(self, values: dict, now: float) -> None:
        wave = gpu_wave(self.seed, self.key, 99, self.idle)
        since_boot = now + self.boot
        # Each CPU busy 5 % plus a third of the GPU wave: the integral in closed form.
        busy = 0.05 * since_boot + 0.003 * wave.integral(since_boot)
        values[("node_cpu_seconds_total", None, "idle")] = since_boot - busy
        values[("node_cpu_seconds_total", None, "user")] = 0.8 * busy
        values[("node_cpu_seconds_total", None, "system")] = 0.2 * busy
        values[("node_load1", None, "")] = HOST_CPUS * (0.05 + 0.003 * wave.at(now))
        values[("node_memory_MemAvailable_bytes", None, "")] = HOST_MEMORY * (
            0.9 - 0.6 * self._memory_fraction(now)
        )


def services_of(profile: Profile) -> dict[str, int]:
    return {name: BY_NAME[name].port for name in profile.services}
