"""dcgm-exporter's fields as NVML gives them: name, Prometheus type, help and how to read each.

The table follows dcgm-exporter's ``etc/default-counters.csv`` (its order, types and
help texts), plus the few fields MAC has always served beside them (PCIe throughput,
volatile ECC totals, clock throttle reasons). Values are converted the way DCGM's
cache manager converts NVML's (W from mW, MiB from bytes rounded down, ratios from
percentages), so a panel reads the same number from MAC and from dcgm-exporter.

Two kinds of field need state across scrapes, kept per GPU in ``GpuState``:

* ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL``: DCGM turns NVML's cumulative NVLink KiB
  counters (TX + RX) into a rate between two reads, divided by 1000, published 0 on
  the first read. dcgm-exporter still types it ``counter``; MAC keeps that type and
  that meaning.
* the profiling fields (``DCGM_FI_PROF_*``): NVML's GPM metrics compare two GPM
  samples, here the previous scrape's and this one's. GPUs without GPM (before
  Hopper, or older drivers) have none, and ``GpmSampler.reason`` says why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

from node.gpu.health import NvidiaReading

# NVML's errors that mean the question does not apply here (to this GPU, this driver, this
# exporter's rights, or not yet), not that the GPU is in trouble: the field is skipped.
# Any other error of a GPU NVML gave a handle for takes it out of reach (exporters.nvidia):
# a driver that answers every query with NVML_ERROR_UNKNOWN after an XID 79 has a GPU
# nothing can use, not one whose fields are all "not supported".
NOT_HERE = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_FUNCTION_NOT_FOUND",  # a driver older than the binding
    "NVML_ERROR_INVALID_ARGUMENT",  # a field id or struct this driver does not know
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    "NVML_ERROR_DEPRECATED",
    "NVML_ERROR_INSUFFICIENT_SIZE",
    "NVML_ERROR_NO_DATA",
    "NVML_ERROR_NOT_READY",
    "NVML_ERROR_IN_USE",  # GPM held by another profiler (DCGM)
    "NVML_ERROR_INSUFFICIENT_RESOURCES",
    "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
    "NVML_ERROR_FREQ_NOT_SUPPORTED",
    "NVML_ERROR_OPERATING_SYSTEM",  # the OS (cgroups) denies this exporter the call
)

# Sentinels NVML and DCGM use for "no value": never export them as numbers.
BLANK_THRESHOLDS = (0x7FFFFFF0, 0xFFFFFFFF, 0x7FFFFFFFFFFFFFF0, 0xFFFFFFFFFFFFFFFF)
MIB = 1024 * 1024


def not_here(nvml: ModuleType, exc: Exception) -> bool:
    """True when NVML's error says the question does not apply here (``NOT_HERE``)."""
    code = getattr(exc, "value", None)
    return code is not None and any(code == getattr(nvml, name, None) for name in NOT_HERE)


def is_blank(value: float) -> bool:
    """True for NVML/DCGM "not available" sentinels."""
    return any(value == sentinel for sentinel in BLANK_THRESHOLDS) or value >= 0x7FFFFFFFFFFFFFF0


class NvlinkRate:
    """DCGM's NVLink bandwidth: (KiB now - KiB before) / seconds / 1000, 0 on the first read."""

    def __init__(self) -> None:
        self._previous: tuple[float, float] | None = None

    def update(self, total_kib: float, now: float) -> int:
        previous, self._previous = self._previous, (total_kib, now)
        if total_kib == 0 or previous is None or now <= previous[1]:
            return 0
        # A driver reload resets NVML's counters; a negative bandwidth means nothing.
        return max(0, int((total_kib - previous[0]) / (now - previous[1]) / 1000))


class GpmSampler:
    """The profiling metrics of one GPU from two GPM samples taken one scrape apart."""

    def __init__(self, metric_ids: tuple[int, ...]) -> None:
        self.metric_ids = metric_ids
        self.supported: bool | None = None  # None: not asked yet
        self.reason = ""
        self._samples: list | None = None
        self._has_baseline = False

    def _probe(self, nvml: ModuleType, handle) -> None:
        query = getattr(nvml, "nvmlGpmQueryDeviceSupport", None)
        if query is None:
            self.supported, self.reason = False, "nvidia-ml-py has no GPM API (upgrade it)"
            return
        try:
            support = query(handle)
        except nvml.NVMLError as exc:
            if not not_here(nvml, exc):
                raise  # the GPU is out of reach: asked again once it is back
            self.supported, self.reason = False, f"nvmlGpmQueryDeviceSupport: {exc}"
            return
        self.supported = bool(support.isSupportedDevice)
        self.reason = "" if self.supported else "GPM not supported by this GPU (needs Hopper+)"

    def read(self, nvml: ModuleType, handle) -> dict[int, float]:
        """GPM metric id -> value since the last call; empty on the first call."""
        if self.supported is None:
            self._probe(nvml, handle)
        if not self.supported:
            raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
        if self._samples is None:
            self._samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        previous, current = self._samples
        try:
            nvml.nvmlGpmSampleGet(handle, current)
        except nvml.NVMLError as exc:
            self._has_baseline = False
            self.reason = f"nvmlGpmSampleGet: {exc}"
            raise
        self.reason = ""
        self._samples = [current, previous]  # this sample is the next scrape's baseline
        if not self._has_baseline:
            self._has_baseline = True
            return {}
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.metric_ids)
        request.sample1, request.sample2 = previous, current
        for slot, metric_id in enumerate(self.metric_ids):
            request.metrics[slot].metricId = metric_id
        nvml.nvmlGpmMetricsGet(request)
        values = {}
        for slot in range(len(self.metric_ids)):
            metric = request.metrics[slot]
            if metric.nvmlReturn == nvml.NVML_SUCCESS and not math.isnan(metric.value):
                values[metric.metricId] = metric.value
        return values


@dataclass
class GpuState:
    """What one GPU's fields keep between scrapes."""

    gpm: GpmSampler
    nvlink: NvlinkRate = field(default_factory=NvlinkRate)


class GpuQuery:
    """NVML's answers for one GPU during one scrape; a call shared by several fields runs once.

    A failed call is remembered too, so that every field it feeds is skipped
    (``not_here``) or takes the GPU out of reach without asking NVML again.
    """

    def __init__(self, nvml: ModuleType, handle, state: GpuState, now: float) -> None:
        self.nvml, self.handle, self.state, self.now = nvml, handle, state, now
        self._answers: dict[object, tuple[bool, object]] = {}

    def once(self, key: object, call: Callable[[], object]):
        if key not in self._answers:
            try:
                self._answers[key] = (True, call())
            except self.nvml.NVMLError as exc:
                self._answers[key] = (False, exc)
        ok, answer = self._answers[key]
        if not ok:
            raise answer
        return answer

    def memory(self):
        """nvmlMemory_v2 (with ``reserved``) where the driver has it, else the v1 answer."""
        nvml, handle = self.nvml, self.handle

        def read():
            try:
                return nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
            except nvml.NVMLError as exc:
                if exc.value in (nvml.NVML_ERROR_GPU_IS_LOST, nvml.NVML_ERROR_NOT_SUPPORTED):
                    raise
                return nvml.nvmlDeviceGetMemoryInfo(handle)  # before R510: no v2

        return self.once("memory", read)

    def utilization(self):
        return self.once("util", lambda: self.nvml.nvmlDeviceGetUtilizationRates(self.handle))

    def remapped_rows(self) -> tuple[int, int, int, int]:
        """(correctable, uncorrectable, pending, failure occurred)."""
        return self.once("remap", lambda: self.nvml.nvmlDeviceGetRemappedRows(self.handle))

    def ecc_total(self, kind: int) -> float:
        """The volatile ECC total of one kind (corrected or uncorrected)."""
        nvml = self.nvml
        return self.once(
            ("ecc", kind),
            lambda: nvml.nvmlDeviceGetTotalEccErrors(self.handle, kind, nvml.NVML_VOLATILE_ECC),
        )

    def clock_reasons(self) -> int:
        """The clock event (throttle) reasons bitmask."""
        # Renamed "clocks event reasons" in newer NVML; older bindings only have the old name.
        nvml = self.nvml
        read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        read = read or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return self.once("clocks", lambda: read(self.handle))

    def gpm(self) -> dict[int, float]:
        return self.once("gpm", lambda: self.state.gpm.read(self.nvml, self.handle))

    def field_value(self, field_id: int) -> float:
        """One NVML field value, raising NVMLError(NOT_SUPPORTED) when the GPU lacks it."""
        return self.once(("fv", field_id), lambda: _field_value(self.nvml, self.handle, field_id))


def _field_value(nvml: ModuleType, handle, field_id: int) -> float:
    value = nvml.nvmlDeviceGetFieldValues(handle, [field_id])[0]
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(value.nvmlReturn)
    union = value.value
    return {
        nvml.NVML_VALUE_TYPE_DOUBLE: lambda: union.dVal,
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: lambda: union.uiVal,
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda: union.ulVal,
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda: union.ullVal,
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda: union.sllVal,
    }.get(value.valueType, lambda: union.siVal)()


@dataclass(frozen=True)
class Field:
    """One DCGM field: ``kind`` is dcgm-exporter's Prometheus type for it."""

    name: str
    kind: str  # "gauge" or "counter"
    help: str
    read: Callable[[GpuQuery], float | None]


def _whole_mib(read: Callable[[GpuQuery], float | None]) -> Callable[[GpuQuery], float | None]:
    """Bytes to whole MiB as DCGM does, after the blank check (a scaled sentinel hides)."""

    def mib(query: GpuQuery) -> float | None:
        raw = read(query)
        return None if raw is None or is_blank(raw) else raw // MIB

    return mib


def _watts(query: GpuQuery) -> float | None:
    milliwatts = query.nvml.nvmlDeviceGetPowerUsage(query.handle)
    return None if is_blank(milliwatts) else milliwatts / 1000


def _vgpu_license(query: GpuQuery) -> float:
    """DCGM's rule: 0 where vGPU licensing does not apply, else whether vGPU is licensed."""
    nvml = query.nvml
    features = nvml.nvmlDeviceGetGridLicensableFeatures(query.handle)
    if not features.isGridLicenseSupported:
        return 0
    for index in range(features.licensableFeaturesCount):
        feature = features.gridLicensableFeatures[index]
        if feature.featureCode == nvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU:
            return 1 if feature.featureState > 0 else 0
    return 0


def _nvlink_bandwidth(query: GpuQuery) -> float:
    nvml = query.nvml
    total = query.field_value(nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX) + query.field_value(
        nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    )
    return query.state.nvlink.update(total, query.now)


def _gpm(metric_id: int, divisor: float = 1.0) -> Callable[[GpuQuery], float | None]:
    def read(query: GpuQuery) -> float | None:
        value = query.gpm().get(metric_id)
        return None if value is None else value / divisor

    return read


def gpm_metric_ids(nvml: ModuleType) -> tuple[int, ...]:
    return (
        nvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
        nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        nvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
        nvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
        nvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    )


def dcgm_fields(nvml: ModuleType) -> list[Field]:
    """Every field, in dcgm-exporter's default-counters order (MAC's extras where they fit)."""
    n = nvml

    def ecc(kind: int) -> Callable[[GpuQuery], float]:
        return lambda q: q.ecc_total(kind)

    def codec(call: str) -> Callable[[GpuQuery], float]:
        return lambda q: getattr(n, call)(q.handle)[0]  # [utilization, sampling period]

    percent = 100  # DCGM's profiling ratios are NVML's GPM percentages / 100
    return [
        Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
              lambda q: n.nvmlDeviceGetClockInfo(q.handle, n.NVML_CLOCK_SM)),
        Field("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
              lambda q: n.nvmlDeviceGetClockInfo(q.handle, n.NVML_CLOCK_MEM)),
        Field("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).",
              lambda q: q.field_value(n.NVML_FI_DEV_MEMORY_TEMP)),
        Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
              lambda q: n.nvmlDeviceGetTemperature(q.handle, n.NVML_TEMPERATURE_GPU)),
        Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", _watts),
        Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
              "Total energy consumption since boot (in mJ).",
              lambda q: n.nvmlDeviceGetTotalEnergyConsumption(q.handle)),
        Field("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "gauge", "PCIe TX throughput (in KB/s).",
              lambda q: n.nvmlDeviceGetPcieThroughput(q.handle, n.NVML_PCIE_UTIL_TX_BYTES)),
        Field("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "gauge", "PCIe RX throughput (in KB/s).",
              lambda q: n.nvmlDeviceGetPcieThroughput(q.handle, n.NVML_PCIE_UTIL_RX_BYTES)),
        Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.",
              lambda q: n.nvmlDeviceGetPcieReplayCounter(q.handle)),
        Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
              lambda q: q.utilization().gpu),
        Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
              lambda q: q.utilization().memory),
        Field("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).",
              codec("nvmlDeviceGetEncoderUtilization")),
        Field("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).",
              codec("nvmlDeviceGetDecoderUtilization")),
        Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
              _whole_mib(lambda q: q.memory().free)),
        Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
              _whole_mib(lambda q: q.memory().used)),
        Field("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).",
              _whole_mib(lambda q: getattr(q.memory(), "reserved", None))),
        Field("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
              "Total number of single-bit volatile ECC errors.",
              ecc(n.NVML_MEMORY_ERROR_TYPE_CORRECTED)),
        Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
              "Total number of double-bit volatile ECC errors.",
              ecc(n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)),
        Field("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
              "Current clock throttle reasons (bitmask).", lambda q: q.clock_reasons()),
        Field("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
              "Total number of NVLink bandwidth counters for all lanes.", _nvlink_bandwidth),
        Field("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", _vgpu_license),
        Field("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
              "Number of remapped rows for uncorrectable errors",
              lambda q: q.remapped_rows()[1]),
        Field("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
              "Number of remapped rows for correctable errors",
              lambda q: q.remapped_rows()[0]),
        Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
              lambda q: q.remapped_rows()[3]),
        Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge",
              "Ratio of time the graphics engine is active.",
              _gpm(n.NVML_GPM_METRIC_GRAPHICS_UTIL, percent)),
        Field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
              "Ratio of cycles the tensor (HMMA) pipe is active.",
              _gpm(n.NVML_GPM_METRIC_ANY_TENSOR_UTIL, percent)),
        Field("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
              "Ratio of cycles the device memory interface is active sending or receiving data.",
              _gpm(n.NVML_GPM_METRIC_DRAM_BW_UTIL, percent)),
        # DCGM passes NVML's GPM PCIe figures through unscaled; so does MAC.
        Field("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
              "The rate of data transmitted over the PCIe bus - including both protocol headers "
              "and data payloads - in bytes per second.",
              _gpm(n.NVML_GPM_METRIC_PCIE_TX_PER_SEC)),
        Field("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
              "The rate of data received over the PCIe bus - including both protocol headers "
              "and data payloads - in bytes per second.",
              _gpm(n.NVML_GPM_METRIC_PCIE_RX_PER_SEC)),
    ]  # fmt: skip


def _optional(query: GpuQuery, read: Callable[[], float]) -> float | None:
    """A reading the GPU may lack: None for ``not_here`` errors; any other error raises."""
    nvml = query.nvml
    try:
        value = read()
    except nvml.NVMLError as exc:
        if not not_here(nvml, exc):
            raise
        return None
    return None if value is None or is_blank(value) else value


def nvlink_error_fields(nvml: ModuleType) -> tuple[int, ...]:
    """NVLink's CRC (flit, data), replay and recovery error totals over all links."""
    return (
        nvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        nvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        nvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        nvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    )


def health_reading(query: GpuQuery, index: int, uuid: str, serial: str) -> NvidiaReading:
    """What node.gpu.health judges, from this scrape's NVML answers (shared with the fields:
    ECC, remapped rows and clock reasons are asked once). None is "NVML did not say"
    (``not_here``: the remapped rows of a MIG-enabled GPU with active instances); any
    other NVML error raises: the GPU is out of reach."""
    nvml = query.nvml
    reading = NvidiaReading(index, uuid, serial)
    recovery = getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if recovery is not None:  # nvidia-ml-py before 12.570 has no such field
        action = _optional(query, lambda: query.field_value(recovery))
        reading.recovery_action = None if action is None else int(action)
    reading.ecc_uncorrectable = _optional(
        query, lambda: query.ecc_total(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
    )
    reading.ecc_correctable = _optional(
        query, lambda: query.ecc_total(nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED)
    )
    if _optional(query, lambda: query.remapped_rows()[2]) is not None:
        _, _, pending, failed = query.remapped_rows()
        reading.remap_pending, reading.remap_failed = bool(pending), bool(failed)
    links = [_optional(query, lambda f=f: query.field_value(f)) for f in nvlink_error_fields(nvml)]
    if any(value is not None for value in links):
        reading.nvlink_errors = sum(value for value in links if value is not None)
    reasons = _optional(query, query.clock_reasons)
    reading.clock_reasons = None if reasons is None else int(reasons)
    return reading
