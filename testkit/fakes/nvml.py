"""A fake pynvml module: the NVML hardware boundary, with pynvml's own constants and errors.

Everything that is not a device call (constants, ctypes structures, NVMLError and
its per-code subclasses) is the real nvidia-ml-py module's, so the exporter cannot
tell the difference except that no driver is touched. GPM follows NVML's contract:
metrics come from two samples of the same GPU, the second taken after the first.

``python -m testkit.fakes.nvml --port P`` serves dcgm-exporter on two fake
H200s as a real process, for tests that point a real Prometheus at it.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

# What NVML's GPM reports on a busy H200 (percentages; PCIe figures as NVML gives them).
H200_GPM = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 93.5,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 61.25,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 47.5,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 1234.5,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 2345.25,
}


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
    mem_reserved: int = 547_356_672
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
    enc_util: int | None = 0  # None: NOT_SUPPORTED
    dec_util: int | None = 12
    remapped_rows: tuple[int, int, int, int] | None = (1, 0, 0, 0)  # cor, unc, pending, failed
    gpm: dict[int, float] | None = field(default_factory=lambda: dict(H200_GPM))  # None: no GPM
    gpm_error: int | None = None  # nvmlGpmSampleGet fails with this NVML error
    memory_v2: bool = True  # False: a driver before R510, without nvmlDeviceGetMemoryInfo_v2
    lost: bool = False  # every call raises NVML_ERROR_GPU_IS_LOST
    # Every call on the GPU, its handle included, raises this NVML error (NVML_ERROR_UNKNOWN:
    # nvidia-smi's "Unable to determine the device handle ... Unknown Error" after an XID 79).
    error: int | None = None
    # Every call but the handle's raises this NVML error: a driver that still hands out the
    # handle after an XID 79 and answers every question with NVML_ERROR_UNKNOWN.
    query_error: int | None = None
    serial: str = ""  # "": NVML_ERROR_NOT_SUPPORTED, as on boards without one
    recovery_action: int | None = 0  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; None: before r570
    nvlink_errors: int | None = 0  # CRC flit errors of all links; None: no NVLink
    blank_power: bool = False  # power reads back as NVML's "not available" sentinel
    # One reading's NVML error while the rest answer ({"sm_clock": NVML_ERROR_UNKNOWN}).
    field_errors: dict[str, int] = field(default_factory=dict)


class FakeNvml:
    """Module-like object: attribute access falls back to the real pynvml for constants."""

    def __init__(
        self, gpus: list[FakeGpu], driver: str = "550.90.07", init_error: int | None = None
    ):
        self.gpus = gpus
        self.driver = driver
        self.init_error = init_error
        self.pending_xids: list[tuple[int, int]] = []  # (gpu index, xid)
        self.system_error: int | None = None  # the driver stops answering after init
        self.wait_error: int | None = None  # nvmlEventSetWait_v2 fails with this NVML error
        self._gpm_buffers: list = []  # keeps the memory behind each fake GPM sample alive
        self._gpm_taken: dict[int, tuple[int, int]] = {}  # sample address -> (gpu, sequence)
        self._sequence = itertools.count(1)

    def __getattr__(self, name):
        return getattr(pynvml, name)

    def _gpu(self, handle) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        for error in (gpu.error, gpu.query_error):
            if error is not None:
                raise pynvml.NVMLError(error)
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
        if self.system_error is not None:
            raise pynvml.NVMLError(self.system_error)
        return self.driver

    def nvmlDeviceGetCount(self):
        if self.system_error is not None:
            raise pynvml.NVMLError(self.system_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if self.gpus[index].error is not None:
            raise pynvml.NVMLError(self.gpus[index].error)
        return index

    def nvmlDeviceGetUUID(self, h):
        return self._gpu(h).uuid

    def nvmlDeviceGetName(self, h):
        return self._gpu(h).name

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._gpu(h).bus_id)

    def nvmlDeviceGetMinorNumber(self, h):
        return self._gpu(h).minor

    def nvmlDeviceGetSerial(self, h):
        gpu = self._gpu(h)
        return gpu.serial or self._unsupported()

    def nvmlDeviceGetUtilizationRates(self, h):
        gpu = self._gpu(h)
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_mem)

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        gpu = self._gpu(h)
        if version is not None and not gpu.memory_v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if version is None:  # v1: used includes what the driver reserved
            used = gpu.mem_used + gpu.mem_reserved
            return SimpleNamespace(used=used, free=gpu.mem_free, total=used + gpu.mem_free)
        total = gpu.mem_used + gpu.mem_free + gpu.mem_reserved
        return SimpleNamespace(
            version=version,
            total=total,
            reserved=gpu.mem_reserved,
            free=gpu.mem_free,
            used=gpu.mem_used,
        )

    def nvmlDeviceGetEncoderUtilization(self, h):
        gpu = self._gpu(h)
        return [gpu.enc_util, 167_000] if gpu.enc_util is not None else self._unsupported()

    def nvmlDeviceGetDecoderUtilization(self, h):
        gpu = self._gpu(h)
        return [gpu.dec_util, 167_000] if gpu.dec_util is not None else self._unsupported()

    def nvmlDeviceGetRemappedRows(self, h):
        gpu = self._gpu(h)
        return gpu.remapped_rows if gpu.remapped_rows is not None else self._unsupported()

    def nvmlDeviceGetGridLicensableFeatures(self, h):
        self._gpu(h)  # a bare-metal datacenter GPU: no vGPU licensing
        return SimpleNamespace(
            isGridLicenseSupported=0, licensableFeaturesCount=0, gridLicensableFeatures=[]
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
        name = "sm_clock" if clock == pynvml.NVML_CLOCK_SM else "mem_clock"
        if name in gpu.field_errors:
            raise pynvml.NVMLError(gpu.field_errors[name])
        return getattr(gpu, name)

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
        links = None if gpu.nvlink_errors is None else 0
        values = {
            pynvml.NVML_FI_DEV_MEMORY_TEMP: gpu.mem_temp,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: gpu.nvlink_tx_kib,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: gpu.nvlink_rx_kib,
            pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: gpu.recovery_action,
            pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: gpu.nvlink_errors,
            pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: links,
            pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: links,
            pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: links,
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

    def nvmlGpmQueryDeviceSupport(self, h):
        gpu = self._gpu(h)
        return SimpleNamespace(version=1, isSupportedDevice=int(gpu.gpm is not None))

    def nvmlGpmSampleAlloc(self):
        buffer = ctypes.create_string_buffer(16)
        self._gpm_buffers.append(buffer)
        return ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleGet(self, h, sample):
        gpu = self._gpu(h)
        if gpu.gpm is None:
            self._unsupported()
        if gpu.gpm_error is not None:
            raise pynvml.NVMLError(gpu.gpm_error)
        self._gpm_taken[_address(sample)] = (h, next(self._sequence))
        return sample

    def nvmlGpmMetricsGet(self, request):
        first = self._gpm_taken.get(_address(request.sample1))
        second = self._gpm_taken.get(_address(request.sample2))
        if first is None or second is None or first[0] != second[0] or first[1] >= second[1]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self._gpu(second[0])
        for slot in range(request.numMetrics):
            metric = request.metrics[slot]
            value = gpu.gpm.get(metric.metricId)
            metric.nvmlReturn = (
                pynvml.NVML_SUCCESS if value is not None else pynvml.NVML_ERROR_NOT_SUPPORTED
            )
            metric.value = value if value is not None else 0.0
        return request

    def nvmlEventSetCreate(self):
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        self._gpu(h)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        if self.wait_error is not None:
            raise pynvml.NVMLError(self.wait_error)
        if not self.pending_xids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.pending_xids.pop(0)
        return SimpleNamespace(device=index, eventData=xid, eventType=8)


def _address(sample) -> int | None:
    return ctypes.cast(sample, ctypes.c_void_p).value


def two_h200s(**second) -> FakeNvml:
    """The recorded node of the exporter tests: GPU 0 with NVLink, GPU 1 without (``second``
    overrides GPU 1's fields)."""
    return FakeNvml(
        [
            FakeGpu(uuid="GPU-5d2f7b1e-8c3a-4f6e-9b0d-2a7c1e4f8b93", serial="1650924060123"),
            FakeGpu(uuid="GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d", bus_id="00000000:3B:00.0",
                    minor=1, util_gpu=0, mem_temp=None, nvlink_tx_kib=None, nvlink_rx_kib=None,
                    nvlink_errors=None, **second),
        ]
    )  # fmt: skip


def main() -> None:
    from exporters.nvidia import NvmlSource, generate_dcgm_latest
    from exporters.runtime import Exporter
    from exporters.server import bind_socket, serve_exporter

    ap = argparse.ArgumentParser(description="dcgm-exporter on two fake H200s")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--hostname", default="gpu-node-17")
    args = ap.parse_args()
    source = NvmlSource(args.hostname, nvml=two_h200s())
    exporter = Exporter("dcgm-exporter", [source], exposition=generate_dcgm_latest)
    serve_exporter(exporter, bind_socket(args.bind, args.port))


if __name__ == "__main__":
    main()
