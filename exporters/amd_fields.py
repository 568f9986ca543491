"""rocm-exporter's per-block ECC, PCIe, clocks, XGMI, violation, HBM and health families.

The names, units and extra labels are AMD device-metrics-exporter's (all gauges
there, so gauges here): ``gpu_ecc_{correct,uncorrect,deferred}_<block>`` and their
``_total``, ``pcie_*``, ``gpu_clock``/``gpu_min_clock``/``gpu_max_clock``
{clock_index, clock_type: "system" for sclk, "memory" for mclk},
``gpu_xgmi_link_{rx,tx}`` {link_index} (KB), ``gpu_violation_*`` (MI300 throttle
residency), ``gpu_hbm_temperature`` {hbm_index}, ``gpu_gfx_busy_instantaneous``
{xcc_index} and ``gpu_health``.

Two readers fill the same ``GpuFields``: amdsmi (``read_amdsmi_fields``), and the
amdgpu driver's sysfs where amdsmi is missing (``read_sysfs_fields``: ``ras/*_err_count``,
``pcie_replay_count``, ``{current,max}_link_speed``, ``pp_dpm_{sclk,mclk}``). Sysfs
has no XGMI, violation or HBM counters: those families are then absent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from prometheus_client.core import GaugeMetricFamily, Metric

from node.host import list_dir, read_int, read_text, read_value

# ras/<file>_err_count -> AMD's block suffix (the driver calls BIF "pcie_bif").
ECC_BLOCKS = {
    "umc": "umc", "sdma": "sdma", "gfx": "gfx", "mmhub": "mmhub", "athub": "athub",
    "pcie_bif": "bif", "hdp": "hdp", "xgmi_wafl": "xgmi_wafl", "df": "df", "smn": "smn",
    "sem": "sem", "mp0": "mp0", "mp1": "mp1", "fuse": "fuse", "mca": "mca", "vcn": "vcn",
    "jpeg": "jpeg", "ih": "ih", "mpio": "mpio",
}  # fmt: skip
ECC_KINDS = (("correct", "ce"), ("uncorrect", "ue"), ("deferred", "de"))
PCIE = {
    "pcie_speed": "Current PCIe speed in GT/s.",
    "pcie_max_speed": "Maximum capable PCIe speed in GT/s.",
    "pcie_bandwidth": "Current instantaneous PCIe bandwidth in Mb/s.",
    "pcie_replay_count": "Total number of PCIe replays (NAKs).",
    "pcie_recovery_count": "Total number of PCIe link recoveries (L0 to recovery).",
    "pcie_replay_rollover_count": "PCIe replay accumulated rollover count.",
    "pcie_nack_sent_count": "PCIe NACK sent accumulated count.",
    "pcie_nack_received_count": "PCIe NACK received accumulated count.",
}
# amdsmi gpu_metrics key -> gpu_violation_<name>
VIOLATIONS = {
    "accumulation_counter": "current_accumulated_counter",
    "prochot_residency_acc": "processor_hot_residency_accumulated",
    "ppt_residency_acc": "ppt_residency_accumulated",
    "socket_thm_residency_acc": "socket_thermal_residency_accumulated",
    "vr_thm_residency_acc": "vr_thermal_residency_accumulated",
    "hbm_thm_residency_acc": "hbm_thermal_residency_accumulated",
}
# amdsmi clock domain -> AMD's clock_type label: gpuagent's GPU_CLOCK_TYPE_* name in lower
# case (sclk is "system", mclk "memory"), as device-metrics-exporter's metricslist.md shows.
CLOCK_TYPES = {"GFX": "system", "MEM": "memory"}
DPM_LINE = re.compile(r"^\s*(\d+):\s*(\d+)\s*Mhz\s*(\*)?", re.I)
SPEED = re.compile(r"^\s*([\d.]+)\s*GT/s")


@dataclass
class GpuFields:
    """The readings beyond activity, memory, temperature and power; None/empty: not here."""

    ecc: dict[str, dict[str, float]] = field(default_factory=dict)  # block -> kind -> count
    pcie: dict[str, float] = field(default_factory=dict)  # family -> value
    clocks: list[tuple[str, float, float | None, float | None]] = field(default_factory=list)
    xgmi_rx_kb: list[float] = field(default_factory=list)
    xgmi_tx_kb: list[float] = field(default_factory=list)
    violations: dict[str, float] = field(default_factory=dict)
    hbm_temperatures: list[float] = field(default_factory=list)
    gfx_busy_instantaneous: list[float] = field(default_factory=list)
    # The source's memory (exporters.amd) fills these two. False: the GPU answered before
    # and answers none of its readings now.
    readable: bool = True
    # Uncorrectable errors that RAS blocks which did not answer now counted when last read:
    # the health flag still counts them, no per-block series shows them as current.
    uncorrect_unanswered: float = 0.0

    @property
    def healthy(self) -> bool:
        """AMD's gpu_health from what MAC sees: readable and no uncorrectable ECC error."""
        counted = sum(c.get("uncorrect", 0) for c in self.ecc.values())
        return self.readable and not (counted or self.uncorrect_unanswered)

    def answered(self) -> bool:
        """Whether any of these readings came back. Not the PCIe link speeds: the PCI core
        answers them from the config space whatever state the GPU is in."""
        pcie = set(self.pcie) - {"pcie_speed", "pcie_max_speed"}
        return bool(
            any(self.ecc.values())
            or pcie
            or self.clocks
            or self.xgmi_rx_kb
            or self.xgmi_tx_kb
            or self.violations
            or self.hbm_temperatures
            or self.gfx_busy_instantaneous
        )


def parse_ras_count(text: str) -> dict[str, float]:
    """``ue: 0\\nce: 3\\n[de: 0]`` -> {"uncorrect": 0, "correct": 3[, "deferred": 0]}."""
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        for kind, short in ECC_KINDS:
            if key.strip() == short and value.strip().isdigit():
                found[kind] = float(value)
    return found


def parse_dpm(text: str) -> tuple[float, float, float] | None:
    """pp_dpm_sclk: (current, lowest, highest) MHz; None without a current (``*``) level."""
    levels = [
        (float(m.group(2)), bool(m.group(3))) for m in map(DPM_LINE.match, text.splitlines()) if m
    ]
    current = [mhz for mhz, active in levels if active]
    if not current:
        return None
    mhz = [level for level, _ in levels]
    return current[0], min(mhz), max(mhz)


def read_sysfs_fields(device: Path) -> GpuFields:
    """What the amdgpu driver's sysfs files under the card's PCI device tell."""
    fields = GpuFields()
    for name in list_dir(device / "ras"):
        block = ECC_BLOCKS.get(name.removesuffix("_err_count"))
        text = read_text(device / "ras" / name) if name.endswith("_err_count") else None
        if block and text is not None:
            fields.ecc[block] = parse_ras_count(text)
    replay = read_int(device / "pcie_replay_count")
    if replay is not None:
        fields.pcie["pcie_replay_count"] = float(replay)
    for family, filename in (
        ("pcie_speed", "current_link_speed"),
        ("pcie_max_speed", "max_link_speed"),
    ):
        match = SPEED.match(read_value(device / filename) or "")
        if match:
            fields.pcie[family] = float(match.group(1))
    for kind, filename in (("system", "pp_dpm_sclk"), ("memory", "pp_dpm_mclk")):
        dpm = parse_dpm(read_text(device / filename) or "")
        if dpm:
            fields.clocks.append((kind, *dpm))
    return fields


def _number(value) -> float | None:
    # amdsmi returns "N/A" (or the type's maximum) for what a card does not report.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if value in (0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF) else float(value)


def _numbers(values) -> list[float]:
    found = [_number(v) for v in values] if isinstance(values, list) else []
    return [v for v in found if v is not None]


def call(amdsmi: ModuleType, attempt: Callable, name: str, *args):
    """amdsmi.<name>(*args) through ``attempt``; None where this amdsmi lacks the call."""
    function = getattr(amdsmi, name, None)
    return attempt(function, *args) if function is not None else None


def read_amdsmi_fields(amdsmi: ModuleType, handle, attempt: Callable) -> GpuFields:
    """The same readings through amdsmi; ``attempt`` returns None for unsupported calls."""
    fields = GpuFields()
    blocks = getattr(amdsmi, "AmdSmiGpuBlock", None)
    for name, block in ECC_BLOCKS.items():
        member = getattr(blocks, name.upper(), None) if blocks else None
        counts = (
            call(amdsmi, attempt, "amdsmi_get_gpu_ecc_count", handle, member)
            if member is not None
            else None
        )
        if counts:
            fields.ecc[block] = {
                kind: value
                for kind, key in (("correct", "correctable_count"),
                                  ("uncorrect", "uncorrectable_count"),
                                  ("deferred", "deferred_count"))
                if (value := _number(counts.get(key))) is not None
            }  # fmt: skip
    pcie = call(amdsmi, attempt, "amdsmi_get_pcie_info", handle) or {}
    static, metric = pcie.get("pcie_static") or {}, pcie.get("pcie_metric") or {}
    for family, source, key, scale in (
        ("pcie_speed", metric, "pcie_speed", 1e-3),  # MT/s -> GT/s
        ("pcie_max_speed", static, "max_pcie_speed", 1e-3),
        ("pcie_bandwidth", metric, "pcie_bandwidth", 1.0),
        ("pcie_replay_count", metric, "pcie_replay_count", 1.0),
        ("pcie_recovery_count", metric, "pcie_l0_to_recovery_count", 1.0),
        ("pcie_replay_rollover_count", metric, "pcie_replay_roll_over_count", 1.0),
        ("pcie_nack_sent_count", metric, "pcie_nak_sent_count", 1.0),
        ("pcie_nack_received_count", metric, "pcie_nak_received_count", 1.0),
    ):
        value = _number(source.get(key))
        if value is not None:
            fields.pcie[family] = value * scale
    clk = getattr(amdsmi, "AmdSmiClkType", None)
    for kind, label in CLOCK_TYPES.items():
        info = (
            call(amdsmi, attempt, "amdsmi_get_clock_info", handle, getattr(clk, kind))
            if clk
            else None
        )
        current = _number((info or {}).get("clk"))
        if current is not None:
            fields.clocks.append(
                (label, current, _number(info.get("min_clk")), _number(info.get("max_clk")))
            )
    metrics = call(amdsmi, attempt, "amdsmi_get_gpu_metrics_info", handle) or {}
    fields.hbm_temperatures = _numbers(metrics.get("temperature_hbm"))
    fields.xgmi_rx_kb = _numbers(metrics.get("xgmi_read_data_acc"))
    fields.xgmi_tx_kb = _numbers(metrics.get("xgmi_write_data_acc"))
    for key, name in VIOLATIONS.items():
        value = _number(metrics.get(key))
        if value is not None:
            fields.violations[name] = value
    partitions = metrics.get("xcp_stats") or []
    if isinstance(partitions, list) and partitions and isinstance(partitions[0], dict):
        fields.gfx_busy_instantaneous = _numbers(partitions[0].get("gfx_busy_inst"))
    return fields


def families(gpus: Iterable[tuple[list[str], GpuFields]], labels: list[str]) -> Iterable[Metric]:
    """The families above for (label values, fields) of each GPU."""
    made: dict[str, GaugeMetricFamily] = {}

    def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
        if name not in made:
            made[name] = GaugeMetricFamily(name, doc, labels=[*extra, *labels])
        return made[name]

    for values, f in gpus:
        gauge("gpu_health", "Health of the GPU (0 = Unhealthy | 1 = Healthy).").add_metric(
            values, 1.0 if f.healthy else 0.0
        )
        for kind, _ in ECC_KINDS:
            present = [counts[kind] for counts in f.ecc.values() if kind in counts]
            if present:
                gauge(f"gpu_ecc_{kind}_total", f"Total {kind}able ECC errors.").add_metric(
                    values, sum(present)
                )
            for block, counts in f.ecc.items():
                if kind in counts:
                    gauge(
                        f"gpu_ecc_{kind}_{block}", f"{kind}able ECC errors in {block}."
                    ).add_metric(values, counts[kind])
        for name, value in f.pcie.items():
            gauge(name, PCIE[name]).add_metric(values, value)
        for index, (kind, current, low, high) in enumerate(f.clocks):
            for name, value in (
                ("gpu_clock", current),
                ("gpu_min_clock", low),
                ("gpu_max_clock", high),
            ):
                if value is not None:
                    doc = f"{name.replace('_', ' ')} of the GPU in MHz."
                    gauge(name, doc, ("clock_index", "clock_type")).add_metric(
                        [str(index), kind, *values], value
                    )
        for name, series, doc, extra in (
            ("gpu_xgmi_link_rx", f.xgmi_rx_kb, "XGMI link data read, KB.", "link_index"),
            ("gpu_xgmi_link_tx", f.xgmi_tx_kb, "XGMI link data written, KB.", "link_index"),
            ("gpu_hbm_temperature", f.hbm_temperatures, "HBM temperature, C.", "hbm_index"),
            ("gpu_gfx_busy_instantaneous", f.gfx_busy_instantaneous,
             "GFX busy instantaneous activity per compute core (XCC), percent.", "xcc_index"),
        ):  # fmt: skip
            for index, value in enumerate(series):
                gauge(name, doc, (extra,)).add_metric([str(index), *values], value)
        for name, value in f.violations.items():
            gauge(
                f"gpu_violation_{name}", f"Throttle violation: {name.replace('_', ' ')}."
            ).add_metric(values, value)
    yield from made.values()
