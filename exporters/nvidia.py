"""dcgm-exporter: NVIDIA GPUs through NVML, under NVIDIA dcgm-exporter's names and labels.

Names and units follow dcgm-exporter's default counters (``DCGM_FI_DEV_FB_USED`` in
MiB, ``DCGM_FI_DEV_POWER_USAGE`` in W, ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` in
mJ...) and every sample carries its labels ``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname`` and ``DCGM_FI_DRIVER_VERSION``, so the
usual DCGM Grafana dashboards work against this exporter.

NVML comes from nvidia-ml-py (``pynvml``); the module object is injected so tests
hand in a fake at exactly that hardware boundary. A field the GPU does not support
(``NVML_ERROR_NOT_SUPPORTED``) or a blank value is skipped, never reported as a
number. A GPU that fell off the bus (``NVML_ERROR_GPU_IS_LOST``) is reported by
``mac_gpu_lost 1`` with the identity it had when it was last seen.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from types import ModuleType

from prometheus_client.core import GaugeMetricFamily, Metric, UnknownMetricFamily

from exporters.runtime import BackendStatus, Exporter, Options

log = logging.getLogger("exporters")

LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
# Sentinels NVML and DCGM use for "no value": never export them as numbers.
BLANK_THRESHOLDS = (0x7FFFFFF0, 0xFFFFFFFF, 0x7FFFFFFFFFFFFFF0, 0xFFFFFFFFFFFFFFFF)
MIB = 1024 * 1024


def is_blank(value: float) -> bool:
    """True for NVML/DCGM "not available" sentinels."""
    return any(value == sentinel for sentinel in BLANK_THRESHOLDS) or value >= 0x7FFFFFFFFFFFFFF0


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class GpuIdentity:
    """What identifies a GPU in every sample; kept so a lost GPU is still named."""

    gpu: str
    uuid: str = ""
    pci_bus_id: str = ""
    device: str = ""
    model: str = ""

    def labels(self, hostname: str, driver: str) -> list[str]:
        return [self.gpu, self.uuid, self.pci_bus_id, self.device, self.model, hostname, driver]

    def to_dict(self) -> dict:
        return asdict(self)


def _scaled(read: Callable, factor: float) -> Callable:
    """Convert units after the blank check: a scaled sentinel no longer looks like one."""

    def scaled(nvml, handle):
        raw = read(nvml, handle)
        return None if raw is None or is_blank(raw) else raw * factor

    return scaled


# (metric, help, counter?, how to read it: fn(nvml, handle) -> number)
def _fields(nvml: ModuleType) -> list[tuple[str, str, bool, Callable]]:
    def ecc(kind):
        return lambda n, h: n.nvmlDeviceGetTotalEccErrors(h, kind, n.NVML_VOLATILE_ECC)

    # Renamed "clocks event reasons" in newer NVML; older bindings only have the old name.
    throttle = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    throttle = throttle or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return [
        (
            "DCGM_FI_DEV_SM_CLOCK",
            "SM clock frequency (in MHz).",
            False,
            lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
        ),
        (
            "DCGM_FI_DEV_MEM_CLOCK",
            "Memory clock frequency (in MHz).",
            False,
            lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP",
            "GPU temperature (in C).",
            False,
            lambda n, h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
        ),
        (
            "DCGM_FI_DEV_MEMORY_TEMP",
            "Memory temperature (in C).",
            False,
            lambda n, h: _field_value(n, h, n.NVML_FI_DEV_MEMORY_TEMP),
        ),
        (
            "DCGM_FI_DEV_POWER_USAGE",
            "Power draw (in W).",
            False,
            _scaled(lambda n, h: n.nvmlDeviceGetPowerUsage(h), 1 / 1000),
        ),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "Total energy consumption since boot (in mJ).",
            True,
            lambda n, h: n.nvmlDeviceGetTotalEnergyConsumption(h),
        ),
        (
            "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
            "PCIe TX throughput (in KB/s).",
            False,
            lambda n, h: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES),
        ),
        (
            "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
            "PCIe RX throughput (in KB/s).",
            False,
            lambda n, h: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES),
        ),
        (
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "Total number of PCIe retries.",
            True,
            lambda n, h: n.nvmlDeviceGetPcieReplayCounter(h),
        ),
        (
            "DCGM_FI_DEV_GPU_UTIL",
            "GPU utilization (in %).",
            False,
            lambda n, h: n.nvmlDeviceGetUtilizationRates(h).gpu,
        ),
        (
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "Memory utilization (in %).",
            False,
            lambda n, h: n.nvmlDeviceGetUtilizationRates(h).memory,
        ),
        (
            "DCGM_FI_DEV_FB_FREE",
            "Framebuffer memory free (in MiB).",
            False,
            _scaled(lambda n, h: n.nvmlDeviceGetMemoryInfo(h).free, 1 / MIB),
        ),
        (
            "DCGM_FI_DEV_FB_USED",
            "Framebuffer memory used (in MiB).",
            False,
            _scaled(lambda n, h: n.nvmlDeviceGetMemoryInfo(h).used, 1 / MIB),
        ),
        (
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "Total number of single-bit volatile ECC errors.",
            True,
            ecc(nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        ),
        (
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "Total number of double-bit volatile ECC errors.",
            True,
            ecc(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ),
        (
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
            "Current clock throttle reasons (bitmask).",
            False,
            lambda n, h: throttle(h),
        ),
        (
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            "Total number of NVLink bandwidth counters for all lanes (in KiB).",
            True,
            lambda n, h: _nvlink_total(n, h),
        ),
    ]


def exact_counter(name: str, doc: str, labels: list[str]) -> UnknownMetricFamily:
    """A DCGM counter under its exact name.

    client_python appends ``_total`` to every counter in the text format, which
    would rename DCGM_FI_DEV_PCIE_REPLAY_COUNTER and break DCGM dashboards; the name
    matters more than the TYPE line, so these go out untyped (rate() works the same).
    """
    return UnknownMetricFamily(name, doc, labels=labels)


def _field_value(nvml: ModuleType, handle, field_id: int) -> float:
    """One NVML field value, raising NVMLError(NOT_SUPPORTED) when the GPU lacks it."""
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


def _nvlink_total(nvml: ModuleType, handle) -> float:
    """NVLink data KiB both ways, all links; NOT_SUPPORTED on GPUs without NVLink."""
    return _field_value(nvml, handle, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX) + _field_value(
        nvml, handle, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    )


def _handle_key(handle) -> object:
    """Compare NVML handles by the address they point at (ctypes pointers are not equal)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


def _import_pynvml() -> ModuleType:
    import pynvml

    return pynvml


class NvmlSource:
    """Every DCGM_FI_* field per GPU, XID events as counters, lost GPUs flagged."""

    name = "nvml"

    def __init__(self, hostname: str, nvml: ModuleType | None = None):
        self.hostname = hostname
        self._nvml = nvml
        self._initialised = False
        self._backend = BackendStatus("nvml", False, "not initialised yet")
        self._identities: dict[int, GpuIdentity] = {}
        self._event_set = None
        self._xids: Counter = Counter()  # (gpu index, xid) -> count since start
        self._last_xid: dict[int, int] = {}
        self._lock = threading.Lock()

    def backends(self) -> list[BackendStatus]:
        return [self._backend]

    @property
    def nvml(self) -> ModuleType:
        if self._nvml is None:
            self._nvml = _import_pynvml()
        return self._nvml

    def _init(self) -> bool:
        if self._initialised:
            return True
        try:
            nvml = self.nvml
        except ImportError:
            self._backend = BackendStatus("nvml", False, "nvidia-ml-py (pynvml) is not installed")
            return False
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._backend = BackendStatus("nvml", False, self._init_reason(exc))
            return False
        self._initialised = True
        self._backend = BackendStatus("nvml", True, "")
        return True

    def _init_reason(self, exc: Exception) -> str:
        nvml = self.nvml
        code = getattr(exc, "value", None)
        if code == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            return "libnvidia-ml.so.1 not found (no NVIDIA driver in this host or container)"
        if code == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
            return "NVIDIA kernel driver not loaded"
        if code == nvml.NVML_ERROR_NO_PERMISSION:
            return "no permission to open /dev/nvidia* (run with the NVIDIA Container Toolkit)"
        return f"nvmlInit failed: {exc}"

    def identity(self, index: int, handle) -> GpuIdentity:
        nvml = self.nvml
        known = self._identities.get(index)
        if known is not None and known.uuid:
            return known
        ident = GpuIdentity(gpu=str(index))
        ident.uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        ident.model = _text(nvml.nvmlDeviceGetName(handle))
        ident.pci_bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        try:
            ident.device = f"nvidia{nvml.nvmlDeviceGetMinorNumber(handle)}"
        except nvml.NVMLError:
            ident.device = f"nvidia{index}"
        self._identities[index] = ident
        return ident

    def discover(self) -> list[GpuIdentity]:
        """The GPUs NVML sees (for the inventory API); empty when NVML is unavailable."""
        with self._lock:
            if not self._init():
                return []
            nvml = self.nvml
            found = []
            try:
                count = nvml.nvmlDeviceGetCount()
            except nvml.NVMLError as exc:
                log.warning("nvmlDeviceGetCount: %s", exc)
                return []
            for index in range(count):
                try:
                    found.append(self.identity(index, nvml.nvmlDeviceGetHandleByIndex(index)))
                except nvml.NVMLError as exc:
                    log.warning("GPU %s: %s", index, exc)
            return found

    def _drain_xid_events(self, handles: dict[int, object]) -> None:
        """Count XID events since the last scrape without blocking (wait of 0 ms)."""
        nvml = self.nvml
        if self._event_set is None:
            try:
                self._event_set = nvml.nvmlEventSetCreate()
                for handle in handles.values():
                    nvml.nvmlDeviceRegisterEvents(
                        handle, nvml.nvmlEventTypeXidCriticalError, self._event_set
                    )
            except nvml.NVMLError as exc:
                log.info("XID events unavailable: %s", exc)
                self._event_set = False
        if not self._event_set:
            return
        by_handle = {_handle_key(handle): index for index, handle in handles.items()}
        while True:
            try:
                event = nvml.nvmlEventSetWait_v2(self._event_set, 0)
            except nvml.NVMLError:
                return  # NVML_ERROR_TIMEOUT: nothing pending
            index = by_handle.get(_handle_key(event.device), -1)
            self._xids[(index, int(event.eventData))] += 1
            self._last_xid[index] = int(event.eventData)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            yield from self._collect()

    def _collect(self) -> Iterable[Metric]:
        count = GaugeMetricFamily("mac_gpu_count", "GPUs NVML reports on this node.")
        lost = GaugeMetricFamily(
            "mac_gpu_lost",
            "1 when NVML reports the GPU lost (fell off the bus, NVML_ERROR_GPU_IS_LOST).",
            labels=LABELS,
        )
        if not self._init():
            count.add_metric([], 0)
            yield count
            return
        nvml = self.nvml
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        fields = _fields(nvml)
        families = {
            name: (exact_counter if counter else GaugeMetricFamily)(name, doc, labels=LABELS)
            for name, doc, counter, _ in fields
        }
        xid_last = GaugeMetricFamily(
            "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=LABELS
        )
        xid_count = exact_counter(
            "DCGM_EXP_XID_ERRORS_COUNT",
            "Count of XID errors since the exporter started, by XID.",
            labels=[*LABELS, "xid"],
        )
        total = nvml.nvmlDeviceGetCount()
        count.add_metric([], total)
        handles: dict[int, object] = {}
        for index in range(total):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                ident = self.identity(index, handle)
            except nvml.NVMLError as exc:
                ident = self._identities.get(index, GpuIdentity(gpu=str(index)))
                lost.add_metric(ident.labels(self.hostname, driver), self._lost(exc))
                continue
            handles[index] = handle
            labels = ident.labels(self.hostname, driver)
            is_lost = 0.0
            for name, _doc, _counter, read in fields:
                try:
                    value = read(nvml, handle)
                except nvml.NVMLError as exc:
                    if exc.value == nvml.NVML_ERROR_GPU_IS_LOST:
                        is_lost = 1.0
                        break
                    continue  # NOT_SUPPORTED and friends: skip, never a fake number
                if value is None or is_blank(value):
                    continue
                families[name].add_metric(labels, value)
            lost.add_metric(labels, is_lost)
        self._drain_xid_events(handles)
        for index, handle_ident in self._identities.items():
            labels = handle_ident.labels(self.hostname, driver)
            if index in self._last_xid:
                xid_last.add_metric(labels, self._last_xid[index])
        for (index, xid), value in sorted(self._xids.items()):
            ident = self._identities.get(index, GpuIdentity(gpu=str(index)))
            xid_count.add_metric([*ident.labels(self.hostname, driver), str(xid)], value)
        yield count
        yield from families.values()
        yield xid_last
        yield xid_count
        yield lost

    def _lost(self, exc: Exception) -> float:
        lost = getattr(exc, "value", None) == self.nvml.NVML_ERROR_GPU_IS_LOST
        if not lost:
            log.warning("GPU handle failed: %s", exc)
        return 1.0 if lost else 0.0


def build(options: Options) -> Exporter:
    return Exporter("dcgm-exporter", [NvmlSource(options.hostname)], timeout=options.timeout)
