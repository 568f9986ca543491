"""A fake pynvml module: the NVML hardware boundary, with pynvml's own constants and errors.

Everything that is not a device call (constants, NVMLError and its per-code
subclasses) is the real nvidia-ml-py module's, so the exporter cannot tell the
difference except that no driver is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pynvml


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H200"
    bus_id: str = "00000000:19:00.0"
    minor: int = 0
    util_gpu: int = 87
    util_mem: int = 41
    mem_used: int = 81_604_378_624
    mem_free: int = 62_199_955_456
    temp: int = 54
    mem_temp: int | None = 47  # None: NVML_ERROR_NOT_SUPPORTED
    power_mw: int = 512_345
    energy_mj: int = 9_876_543_210
    sm_clock: int = 1980
    mem_clock: int = 3201
    pcie_tx_kbs: int = 1_250_000
    pcie_rx_kbs: int = 2_500_000
    replays: int = 3
    ecc_sbe: int | None = 2
    ecc_dbe: int | None = 0
    throttle: int = 0x4
    nvlink_tx_kib: int | None = 123_456_789
    nvlink_rx_kib: int | None = 987_654_321
    lost: bool = False  # every call raises NVML_ERROR_GPU_IS_LOST
    blank_power: bool = False  # power reads back as NVML's "not available" sentinel


class FakeNvml:
    """Module-like object: attribute access falls back to the real pynvml for constants."""

    def __init__(
        self, gpus: list[FakeGpu], driver: str = "550.90.07", init_error: int | None = None
    ):
        self.gpus = gpus
        self.driver = driver
        self.init_error = init_error
        self.pending_xids: list[tuple[int, int]] = []  # (gpu index, xid)

    def __getattr__(self, name):
        return getattr(pynvml, name)

    def _gpu(self, handle) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    @staticmethod
    def _unsupported():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlInit(self):
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, h):
        return self._gpu(h).uuid

    def nvmlDeviceGetName(self, h):
        return self._gpu(h).name

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._gpu(h).bus_id)

    def nvmlDeviceGetMinorNumber(self, h):
        return self._gpu(h).minor

    def nvmlDeviceGetUtilizationRates(self, h):
        gpu = self._gpu(h)
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_mem)

    def nvmlDeviceGetMemoryInfo(self, h):
        gpu = self._gpu(h)
        return SimpleNamespace(
            used=gpu.mem_used, free=gpu.mem_free, total=gpu.mem_used + gpu.mem_free
        )

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._gpu(h).temp

    def nvmlDeviceGetPowerUsage(self, h):
        gpu = self._gpu(h)
        return 0xFFFFFFFF if gpu.blank_power else gpu.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self._gpu(h).energy_mj

    def nvmlDeviceGetClockInfo(self, h, clock):
        gpu = self._gpu(h)
        return gpu.sm_clock if clock == pynvml.NVML_CLOCK_SM else gpu.mem_clock

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        gpu = self._gpu(h)
        return gpu.pcie_tx_kbs if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kbs

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self._gpu(h).replays

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        gpu = self._gpu(h)
        value = gpu.ecc_sbe if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu.ecc_dbe
        return value if value is not None else self._unsupported()

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._gpu(h).throttle

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        gpu = self._gpu(h)
        values = {
            pynvml.NVML_FI_DEV_MEMORY_TEMP: gpu.mem_temp,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: gpu.nvlink_tx_kib,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: gpu.nvlink_rx_kib,
        }
        out = []
        for field_id in field_ids:
            value = values.get(field_id)
            out.append(
                SimpleNamespace(
                    fieldId=field_id,
                    nvmlReturn=pynvml.NVML_SUCCESS
                    if value is not None
                    else pynvml.NVML_ERROR_NOT_SUPPORTED,
                    valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                    value=SimpleNamespace(ullVal=value or 0),
                )
            )
        return out

    def nvmlEventSetCreate(self):
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        self._gpu(h)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        if not self.pending_xids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.pending_xids.pop(0)
        return SimpleNamespace(device=index, eventData=xid, eventType=8)
