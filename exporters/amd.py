"""rocm-exporter: AMD GPUs under AMD device-metrics-exporter's names and labels.

The data comes from amdsmi when the library imports (a ROCm install), else from
the amdgpu driver's sysfs files: ``/sys/class/drm/card*/device/gpu_busy_percent``,
``mem_info_vram_{used,total}`` and the card's hwmon temperatures and power.
Metric names (``gpu_gfx_activity``, ``gpu_used_vram``, ``gpu_edge_temperature``...)
and units (VRAM in MB, power in W) are the device-metrics-exporter's.

Labels are the ones AMD's dashboards filter on: ``gpu_id``, ``gpu_uuid``,
``gpu_partition_id``, ``serial_number``, ``card_model`` (and ``card_vendor``).
``hostname`` and ``cluster_name`` are deliberately not emitted: MAC's Prometheus
targets carry both for every exporter (exporters/README.md, "Label collisions"),
and an exporter label of the same name would be renamed ``exported_*``. ECC, PCIe,
clocks, XGMI, violation, HBM and health families are in exporters.amd_fields.

What a container needs to see AMD GPUs (``/dev/kfd``, ``/dev/dri`` and the
``amdgpu`` kernel module) is checked on every scrape and reported as the reason
of ``mac_exporter_backend_available{backend="amdgpu"}``.

Each GPU's health verdict (``mac_gpu_health`` under AMD's labels, its evidence and the
boot: exporters.gpu_health) is judged by node.gpu.health from AMD's health flag and the
ECC counts, with what the source remembers of each GPU (``Followed``): a GPU that
answered before and answers none of its readings now is unreadable, so unhealthy; the
ECC totals grow only by what a RAS block that answered twice added in between. Only the
steady source is judged: a scrape where amdsmi failed and sysfs answered instead serves
sysfs's readings and no verdict (the master keeps the node's last one), since sysfs
numbers and counts the GPUs its own way (8 cards where amdsmi has 64 CPX partitions).
A failure that lasts UNREACHABLE_GRACE serves amdsmi's GPUs as it last listed them,
degraded (unjudged), so that the master's kept verdict does not stand for hours.
What the judge and ``Followed`` remember is kept in a file across restarts on the same
boot (node.gpu.evidence_state): a rise while the exporter was down counts.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType

from prometheus_client.core import GaugeMetricFamily, Metric

from exporters.amd_fields import (
    GpuFields,
    call,
    families,
    read_amdsmi_fields,
    read_sysfs_fields,
)
from exporters.gpu_health import (
    evidence_backend,
    evidence_file,
    evidence_window,
    verdict_families,
)
from exporters.runtime import BackendStatus, Exporter, Options
from node.gpu.evidence_state import EvidenceState, KeptGpu, gpu_key
from node.gpu.health import DEFAULT_WINDOW, UNREACHABLE_GRACE, AmdReading, GpuJudge
from node.hardware import amd_cards
from node.host import Roots, list_dir, read_boot_id, read_int, read_text, read_value

log = logging.getLogger("exporters")

LABELS = ["gpu_id", "gpu_uuid", "gpu_partition_id", "serial_number", "card_model", "card_vendor"]
MB = 1024 * 1024


@dataclass
class AmdGpu:
    """One AMD GPU's identity and current readings (None: not available on this card)."""

    gpu_id: str
    card: str
    gpu_uuid: str = ""
    partition_id: str = "0"  # AMD's gpu_partition_id: 0 on an unpartitioned (SPX) GPU
    pci_address: str = ""
    serial_number: str = ""
    card_model: str = ""
    card_vendor: str = "AMD"
    gfx_activity: float | None = None
    umc_activity: float | None = None
    vram_used_mb: float | None = None
    vram_total_mb: float | None = None
    temperatures: dict[str, float] = field(default_factory=dict)  # edge/junction/memory -> C
    power_average_w: float | None = None
    power_current_w: float | None = None
    energy_uj: float | None = None
    fields: GpuFields = field(default_factory=GpuFields)

    def to_dict(self) -> dict:
        found = asdict(self)
        del found["fields"]  # the inventory lists identity and readings, not counters
        return found

    def answered(self) -> bool:
        """Whether any reading came back. Not the identity, nor VRAM: amdsmi and the driver
        answer those from what they keep (read at init, or the driver's own bookkeeping)
        whatever state the GPU is in; the rest needs the GPU or its firmware to answer."""
        values = (
            self.gfx_activity,
            self.umc_activity,
            self.power_average_w,
            self.power_current_w,
            self.energy_uj,
        )
        return (
            any(v is not None for v in values) or bool(self.temperatures) or self.fields.answered()
        )


# What names a GPU: an unreadable GPU keeps what it had when it last answered.
IDENTITY = ("gpu_uuid", "partition_id", "pci_address", "serial_number", "card_model", "card_vendor")
JUDGED_KINDS = ("correct", "uncorrect")


class Followed:
    """What the source remembers of one GPU between the scrapes it judges."""

    def __init__(self) -> None:
        self.identity: dict[str, str] = {}  # when it last answered
        self.counts: dict[tuple[str, str], float] = {}  # (RAS block, kind) -> last count
        self.totals: dict[str, float] = {}  # kind -> what the blocks added since first read

    def follow(self, gpu: AmdGpu) -> dict[str, float]:
        """Mark ``gpu`` unreadable where it answered before and not now; its ECC totals.

        A total only grows by what one block added between two readings of it: a block
        that did not answer this scrape adds nothing (and its errors still count for the
        health flag), one read for the first time is a base, and one whose count fell
        (the driver reset it) is a new base. Summing the blocks that answered would turn
        one failed read into a drop and the next full read into a rise of the whole block.
        """
        if gpu.answered():
            self.identity = {name: getattr(gpu, name) for name in IDENTITY}
        elif self.identity:
            for name, value in self.identity.items():
                setattr(gpu, name, value)
            gpu.fields.readable = False
        for block, counts in gpu.fields.ecc.items():
            for kind, value in counts.items():
                before = self.counts.get((block, kind))
                added = value - before if before is not None and value > before else 0.0
                self.totals[kind] = self.totals.get(kind, 0.0) + added
                self.counts[block, kind] = value
        gpu.fields.uncorrect_unanswered = sum(
            value
            for (block, kind), value in self.counts.items()
            if kind == "uncorrect" and block not in gpu.fields.ecc
        )
        return {kind: self.totals[kind] for kind in JUDGED_KINDS if kind in self.totals}

    def kept(self) -> dict[str, dict[str, float]]:
        """The counts a restart must not forget (node.gpu.evidence_state): each block's,
        so that what a block added while the exporter was down counts, and the totals the
        judge follows."""
        blocks = {f"{block}/{kind}": value for (block, kind), value in self.counts.items()}
        return {"blocks": blocks, "totals": dict(self.totals)}

    def restore(self, kept: KeptGpu) -> None:
        """What the exporter's last run on this boot followed of the GPU (``kept``)."""
        blocks = kept.counts.get("blocks", {})
        self.counts = {tuple(name.rsplit("/", 1)): v for name, v in blocks.items() if "/" in name}
        self.totals = dict(kept.counts.get("totals", {}))
        # Kept with its names whole: a GPU that answered before the restart and not now is
        # unreadable, as it would have been without the restart.
        if set(kept.identity) == set(IDENTITY):
            self.identity = dict(kept.identity)


def parse_modules(text: str) -> set[str]:
    """Names of loaded kernel modules from /proc/modules."""
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def hwmon_temperatures(hwmon: str) -> dict[str, float]:
    """edge/junction/memory temperatures in C from an amdgpu hwmon directory."""
    names = {"edge": "edge", "junction": "junction", "mem": "memory"}
    temps = {}
    for entry in sorted(list_dir(hwmon)):
        match = re.match(r"^temp(\d+)_input$", entry)
        if not match:
            continue
        label = read_value(os.path.join(hwmon, f"temp{match.group(1)}_label"))
        value = read_int(os.path.join(hwmon, entry))
        if label in names and value is not None:
            temps[names[label]] = value / 1000.0
    return temps


def read_sysfs_gpus(roots: Roots) -> list[AmdGpu]:
    """Every amdgpu card under <sys>/class/drm, in card order."""
    gpus = []
    for card, device in amd_cards(roots):
        gpu = AmdGpu(gpu_id=str(len(gpus)), card=card)
        try:
            gpu.pci_address = os.path.basename(os.readlink(device))
        except OSError:
            gpu.pci_address = ""
        gpu.serial_number = (
            read_value(device / "serial_number") or read_value(device / "unique_id") or ""
        )
        # sysfs has no UUID; the unique_id (the ASIC's serial) is what identifies the chip.
        gpu.gpu_uuid = read_value(device / "unique_id") or gpu.serial_number
        gpu.partition_id = read_value(device / "partition_id") or "0"
        gpu.fields = read_sysfs_fields(device)
        gpu.card_model = read_value(device / "product_name") or read_value(device / "device") or ""
        gpu.gfx_activity = _float(read_int(device / "gpu_busy_percent"))
        gpu.umc_activity = _float(read_int(device / "mem_busy_percent"))
        used, total = (
            read_int(device / "mem_info_vram_used"),
            read_int(device / "mem_info_vram_total"),
        )
        gpu.vram_used_mb = used / MB if used is not None else None
        gpu.vram_total_mb = total / MB if total is not None else None
        for hwmon in list_dir(device / "hwmon"):
            path = device / "hwmon" / hwmon
            gpu.temperatures.update(hwmon_temperatures(str(path)))
            average = read_int(path / "power1_average")  # microwatts
            current = read_int(path / "power1_input")
            energy = read_int(path / "energy1_input")  # microjoules
            if average is not None:
                gpu.power_average_w = average / 1e6
            if current is not None:
                gpu.power_current_w = current / 1e6
            if energy is not None:
                gpu.energy_uj = float(energy)
        gpus.append(gpu)
    return gpus


def _float(value: int | None) -> float | None:
    return float(value) if value is not None else None


def read_amdsmi_gpus(amdsmi: ModuleType) -> list[AmdGpu]:
    """The same readings through amdsmi (ROCm's library) for the cards it sees."""
    gpus = []
    for index, handle in enumerate(amdsmi.amdsmi_get_processor_handles()):
        gpu = AmdGpu(gpu_id=str(index), card="")

        def attempt(call, *args, gpu_index=index):
            try:
                return call(*args)
            except amdsmi.AmdSmiException as exc:  # not supported on this card or partition
                log.debug("amdsmi %s on GPU %s: %s", call.__name__, gpu_index, exc)
                return None

        asic = attempt(amdsmi.amdsmi_get_gpu_asic_info, handle) or {}
        gpu.card_model = str(asic.get("market_name", ""))
        gpu.serial_number = str(asic.get("asic_serial", ""))
        gpu.pci_address = str(attempt(amdsmi.amdsmi_get_gpu_device_bdf, handle) or "")
        uuid = call(amdsmi, attempt, "amdsmi_get_gpu_device_uuid", handle)
        gpu.gpu_uuid = str(uuid or gpu.serial_number)
        kfd = call(amdsmi, attempt, "amdsmi_get_gpu_kfd_info", handle) or {}
        partition = kfd.get("current_partition_id")
        gpu.partition_id = str(partition) if isinstance(partition, int) else "0"
        gpu.fields = read_amdsmi_fields(amdsmi, handle, attempt)
        activity = attempt(amdsmi.amdsmi_get_gpu_activity, handle) or {}
        gpu.gfx_activity = _number(activity.get("gfx_activity"))
        gpu.umc_activity = _number(activity.get("umc_activity"))
        vram = attempt(amdsmi.amdsmi_get_gpu_vram_usage, handle) or {}
        gpu.vram_used_mb = _number(vram.get("vram_used"))
        gpu.vram_total_mb = _number(vram.get("vram_total"))
        for key, kind in (("edge", "EDGE"), ("junction", "HOTSPOT"), ("memory", "VRAM")):
            value = attempt(
                amdsmi.amdsmi_get_temp_metric,
                handle,
                getattr(amdsmi.AmdSmiTemperatureType, kind),
                amdsmi.AmdSmiTemperatureMetric.CURRENT,
            )
            if _number(value) is not None:
                gpu.temperatures[key] = float(value)
        # accumulator x resolution (uJ); amdsmi before 6.2 called the accumulator "power".
        energy = call(amdsmi, attempt, "amdsmi_get_energy_count", handle) or {}
        ticks = _number(energy.get("energy_accumulator", energy.get("power")))
        resolution = _number(energy.get("counter_resolution"))
        if ticks is not None and resolution is not None:
            gpu.energy_uj = ticks * resolution
        power = attempt(amdsmi.amdsmi_get_power_info, handle) or {}
        gpu.power_average_w = _number(power.get("average_socket_power"))
        gpu.power_current_w = _number(power.get("current_socket_power"))
        gpus.append(gpu)
    return gpus


def _number(value) -> float | None:
    # amdsmi returns "N/A" for fields a card does not report.
    return float(value) if isinstance(value, int | float) else None


def _import_amdsmi() -> ModuleType | None:
    try:
        import amdsmi  # optional: only on ROCm hosts
    except ImportError:
        return None
    return amdsmi


class AmdGpuSource:
    """gpu_* families per GPU, from amdsmi or sysfs, with the prerequisites checked."""

    name = "amdgpu"

    def __init__(
        self,
        roots: Roots,
        amdsmi: ModuleType | bool | None = None,
        *,
        window: float = DEFAULT_WINDOW,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,  # evidence windows: immune to NTP steps
        evidence_file: Path | None = None,
    ):
        self.roots = roots
        self._clock = clock
        self._judge = GpuJudge(window)
        # The judge's memory, and the RAS counts followed, across restarts on this boot.
        self._evidence = EvidenceState(evidence_file, roots) if evidence_file else None
        # By card and index: a card that takes a vanished card's index starts afresh, so
        # the judge sees a new base there, never another card's counts.
        self._followed: dict[tuple[str, str], Followed] = {}
        self._wall = wall
        # None: try to import amdsmi; False: never (sysfs only); a module: use it.
        self._amdsmi = _import_amdsmi() if amdsmi is None else (amdsmi or None)
        self._amdsmi_ready = False
        self._amdsmi_reason = (
            "amdsmi not importable: reading amdgpu sysfs" if self._amdsmi is None else ""
        )
        self._backends: list[BackendStatus] = []
        # The GPUs as amdsmi last listed them, and since when (tick) it has failed in a row:
        # a failure that lasts is served as their verdicts, degraded (``_unjudged``).
        self._amdsmi_gpus: list[AmdGpu] = []
        self._failing_since: float | None = None

    def backends(self) -> list[BackendStatus]:
        if self._evidence is None:
            return self._backends
        return [*self._backends, evidence_backend(self._evidence)]

    def prerequisites(self) -> str:
        """Why AMD GPUs cannot be used here; empty when /dev/kfd, /dev/dri and amdgpu are there."""
        if not self.roots.dev("kfd").exists():
            return f"{self.roots.dev('kfd')} missing (pass --device=/dev/kfd to the container)"
        if not self.roots.dev("dri").is_dir():
            return f"{self.roots.dev('dri')} missing (pass --device=/dev/dri to the container)"
        modules = read_text(self.roots.proc("modules"))
        if modules is None:
            return f"{self.roots.proc('modules')} unreadable: cannot tell if amdgpu is loaded"
        if "amdgpu" not in parse_modules(modules):
            return "amdgpu kernel module not loaded (sudo modprobe amdgpu)"
        return ""

    def gpus(self) -> list[AmdGpu]:
        """Current readings of every AMD GPU (the inventory API uses this too)."""
        return self._read()[0]

    def _read(self) -> tuple[list[AmdGpu], str]:
        """The GPUs, and why amdsmi failed where sysfs answered in its place this scrape."""
        if self._amdsmi is not None and not self._amdsmi_ready:
            try:
                self._amdsmi.amdsmi_init()
                self._amdsmi_ready = True
            except Exception as exc:  # amdsmi raises its own types; sysfs still works
                log.warning("amdsmi_init failed (%s); reading amdgpu sysfs from now on", exc)
                self._amdsmi_reason = f"amdsmi_init failed: {exc}; reading amdgpu sysfs"
                self._amdsmi = None
        if self._amdsmi_ready:
            try:
                return read_amdsmi_gpus(self._amdsmi), ""
            except Exception as exc:  # one bad call must not lose the GPUs: use sysfs
                log.warning("amdsmi failed (%s); reading amdgpu sysfs this scrape", exc)
                why = f"amdsmi failed: {exc}; read amdgpu sysfs this scrape, GPUs not judged"
                return read_sysfs_gpus(self.roots), why
        return read_sysfs_gpus(self.roots), ""

    def _follow(self, gpus: list[AmdGpu]) -> list[dict[str, float]]:
        """Each GPU's ECC totals, after its memory marked it unreadable where it is."""
        followed = {(gpu.card, gpu.gpu_id): Followed() for gpu in gpus}
        # A GPU no longer listed is forgotten: were it listed again, it starts afresh.
        followed |= {key: seen for key, seen in self._followed.items() if key in followed}
        self._followed = followed
        for gpu in gpus:
            self._restore(gpu, followed[gpu.card, gpu.gpu_id])
        return [followed[gpu.card, gpu.gpu_id].follow(gpu) for gpu in gpus]

    def _restore(self, gpu: AmdGpu, followed: Followed) -> None:
        """At a GPU's first sight, what the exporter's last run on this boot kept of it."""
        if self._evidence is None:
            return
        index = int(gpu.gpu_id)
        key = gpu_key(index, gpu.gpu_uuid, gpu.serial_number, gpu.partition_id)
        kept = self._evidence.bind(index, key)
        if kept is not None:
            followed.restore(kept)
            self._judge.restore(index, kept.memory)

    def _keep(self) -> None:
        """Save what a restart must not forget, after the GPUs were judged."""
        if self._evidence is None:
            return
        followed = {int(gpu_id): seen for (_, gpu_id), seen in self._followed.items()}
        self._evidence.save(
            self._judge.memories(),
            {index: seen.kept() for index, seen in followed.items()},
            {index: seen.identity for index, seen in followed.items()},
        )

    def collect(self) -> Iterable[Metric]:
        problem = self.prerequisites()
        gpus, fallback = self._read()
        # A fallback's GPUs are sysfs's, numbered and counted its own way: not judged, and
        # kept out of the memory of the GPUs amdsmi numbers. Without any GPU, judged: none
        # found means every one is missing.
        judged = not fallback or not gpus
        totals = self._follow(gpus) if not fallback else []
        if not fallback:
            self._amdsmi_gpus, self._failing_since = (gpus if self._amdsmi_ready else []), None
        elif self._failing_since is None:
            self._failing_since = self._clock()
        self._backends = [
            BackendStatus(
                "amdgpu",
                not problem and bool(gpus),
                problem or ("" if gpus else f"no AMD GPU under {self.roots.sys('class', 'drm')}"),
            ),
            BackendStatus(
                "amdsmi",
                self._amdsmi_ready and not fallback,
                fallback or ("" if self._amdsmi_ready else self._amdsmi_reason),
            ),
        ]
        yield GaugeMetricFamily(
            "gpu_nodes_total", "Number of GPU nodes on the machine.", value=len(gpus)
        )
        gauges = {
            name: GaugeMetricFamily(name, doc, labels=LABELS)
            for name, doc in (
                ("gpu_gfx_activity", "Graphics engine usage percentage (0 - 100)."),
                ("gpu_umc_activity", "Memory engine usage percentage (0 - 100)."),
                ("gpu_used_vram", "Used VRAM in MB."),
                ("gpu_total_vram", "Total VRAM in MB."),
                ("gpu_free_vram", "Free VRAM in MB."),
                ("gpu_edge_temperature", "Edge temperature value in Celsius."),
                ("gpu_junction_temperature", "Hotspot (junction) temperature in Celsius."),
                ("gpu_memory_temperature", "Memory temperature value in Celsius."),
                ("gpu_power_usage", "Power usage in Watts."),
                ("gpu_package_power", "Current socket power in Watts."),
                ("gpu_average_package_power", "Average socket power in Watts."),
            )
        }
        # A gauge in device-metrics-exporter too (a Counter family would add _total).
        energy = GaugeMetricFamily(
            "gpu_energy_consumed", "Energy consumed in micro Joules.", labels=LABELS
        )
        for gpu in gpus:
            labels = self.label_values(gpu)
            free = (
                gpu.vram_total_mb - gpu.vram_used_mb
                if gpu.vram_total_mb is not None and gpu.vram_used_mb is not None
                else None
            )
            power = gpu.power_average_w if gpu.power_average_w is not None else gpu.power_current_w
            values = {
                "gpu_gfx_activity": gpu.gfx_activity,
                "gpu_umc_activity": gpu.umc_activity,
                "gpu_used_vram": gpu.vram_used_mb,
                "gpu_total_vram": gpu.vram_total_mb,
                "gpu_free_vram": free,
                "gpu_edge_temperature": gpu.temperatures.get("edge"),
                "gpu_junction_temperature": gpu.temperatures.get("junction"),
                "gpu_memory_temperature": gpu.temperatures.get("memory"),
                "gpu_power_usage": power,
                "gpu_package_power": gpu.power_current_w,
                "gpu_average_package_power": gpu.power_average_w,
            }
            for name, value in values.items():
                if value is not None:
                    gauges[name].add_metric(labels, value)
            if gpu.energy_uj is not None:
                energy.add_metric(labels, gpu.energy_uj)
        yield from gauges.values()
        yield energy
        yield from families(((self.label_values(gpu), gpu.fields) for gpu in gpus), LABELS)
        if not problem and judged:  # the GPUs can be judged (none found: they are missing)
            now, tick = self._wall(), self._clock()
            verdicts = [
                (self.label_values(gpu), self._judge.amd(reading(gpu, ecc), now, tick))
                for gpu, ecc in zip(gpus, totals, strict=True)
            ]
            yield from verdict_families(verdicts, LABELS, read_boot_id(self.roots))
            self._keep()
        elif not problem and fallback:
            yield from self._unjudged(fallback)
            self._keep()

    def _unjudged(self, why: str) -> Iterable[Metric]:
        """While amdsmi has failed for UNREACHABLE_GRACE, the verdicts of the GPUs it last
        listed, each degraded with amdsmi's words: the master would otherwise keep the
        node's last verdict for as long as the failure lasts. A shorter failure (one
        scrape) serves none, and the master keeps the last one."""
        if not self._amdsmi_gpus or self._failing_since is None:
            return
        tick = self._clock()
        if tick - self._failing_since < UNREACHABLE_GRACE:
            return
        words = why.split(";", 1)[0]  # "amdsmi failed: <amdsmi's words>"
        now = self._wall()
        verdicts = [
            (
                self.label_values(gpu),
                self._judge.amd(
                    AmdReading(int(gpu.gpu_id), gpu.gpu_uuid, gpu.serial_number, unjudged=words),
                    now,
                    tick,
                ),
            )
            for gpu in self._amdsmi_gpus
        ]
        yield from verdict_families(verdicts, LABELS, read_boot_id(self.roots))

    @staticmethod
    def label_values(gpu: AmdGpu) -> list[str]:
        return [
            gpu.gpu_id,
            gpu.gpu_uuid,
            gpu.partition_id,
            gpu.serial_number,
            gpu.card_model,
            gpu.card_vendor,
        ]


def reading(gpu: AmdGpu, totals: dict[str, float]) -> AmdReading:
    """What node.gpu.health judges of one AMD GPU: its health flag and ECC totals
    (``Followed.follow``'s: None for a kind no RAS block ever counted)."""
    # Unreadable is its own evidence (judged once it lasts); the flag then says nothing of
    # the errors counted, while the served gpu_health is AMD's own (unreadable: 0).
    unreadable = not gpu.fields.readable
    return AmdReading(
        int(gpu.gpu_id),
        gpu.gpu_uuid,
        gpu.serial_number,
        health_flag=None if unreadable else gpu.fields.healthy,
        ecc_uncorrectable=totals.get("uncorrect"),
        ecc_correctable=totals.get("correct"),
        unreadable=unreadable,
    )


def build(options: Options) -> Exporter:
    source = AmdGpuSource(
        options.roots,
        window=evidence_window(options),
        evidence_file=evidence_file(options, "rocm-exporter"),
    )
    return Exporter("rocm-exporter", [source], timeout=options.timeout)
