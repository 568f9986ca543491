"""dcgm-exporter: DCGM names and labels from NVML, through a fake pynvml module."""

from __future__ import annotations

import pynvml

from exporters.nvidia import NvmlSource
from exporters.runtime import Exporter
from tests.exporters.conftest import assert_golden, backend_available, scrape_text
from tests.exporters.fake_nvml import FakeGpu, FakeNvml

UUID0 = "GPU-5d2f7b1e-8c3a-4f6e-9b0d-2a7c1e4f8b93"
UUID1 = "GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"


def two_h200s(**second) -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(uuid=UUID0),
            FakeGpu(uuid=UUID1, bus_id="00000000:3B:00.0", minor=1, util_gpu=0, mem_temp=None,
                    nvlink_tx_kib=None, nvlink_rx_kib=None, **second),
        ]
    )  # fmt: skip


def gpu_labels(index: int, uuid: str, bus: str) -> dict:
    return {
        "gpu": str(index),
        "UUID": uuid,
        "pci_bus_id": bus,
        "device": f"nvidia{index}",
        "modelName": "NVIDIA H200",
        "Hostname": "gpu-node-17",
        "DCGM_FI_DRIVER_VERSION": "550.90.07",
    }


GPU0 = gpu_labels(0, UUID0, "00000000:19:00.0")
GPU1 = gpu_labels(1, UUID1, "00000000:3B:00.0")


def registry_for(nvml: FakeNvml):
    return Exporter("dcgm-exporter", [NvmlSource("gpu-node-17", nvml=nvml)]).registry


def test_dcgm_names_units_and_labels():
    registry = registry_for(two_h200s())
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_UTIL", GPU0) == 87
    assert registry.get_sample_value("DCGM_FI_DEV_FB_USED", GPU0) == 81_604_378_624 / 2**20
    assert registry.get_sample_value("DCGM_FI_DEV_POWER_USAGE", GPU0) == 512.345
    assert registry.get_sample_value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", GPU0) == 9_876_543_210
    assert registry.get_sample_value("DCGM_FI_DEV_MEMORY_TEMP", GPU0) == 47
    assert registry.get_sample_value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", GPU0) == (
        123_456_789 + 987_654_321
    )
    assert registry.get_sample_value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", GPU0) == 4


def test_not_supported_and_blank_values_are_skipped_not_zero():
    registry = registry_for(two_h200s(blank_power=True))
    assert registry.get_sample_value("DCGM_FI_DEV_MEMORY_TEMP", GPU1) is None
    assert registry.get_sample_value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", GPU1) is None
    assert registry.get_sample_value("DCGM_FI_DEV_POWER_USAGE", GPU1) is None
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_UTIL", GPU1) == 0  # a real zero stays


def test_a_gpu_that_fell_off_the_bus_is_reported_lost():
    nvml = two_h200s()
    source = NvmlSource("gpu-node-17", nvml=nvml)
    registry = Exporter("dcgm-exporter", [source]).registry
    assert registry.get_sample_value("mac_gpu_lost", GPU1) == 0
    nvml.gpus[1].lost = True
    assert registry.get_sample_value("mac_gpu_lost", GPU1) == 1  # still named as it was
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_TEMP", GPU1) is None
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_TEMP", GPU0) == 54


def test_xid_events_are_counted_per_xid():
    nvml = two_h200s()
    registry = registry_for(nvml)
    assert registry.get_sample_value("DCGM_EXP_XID_ERRORS_COUNT", {**GPU1, "xid": "79"}) is None
    nvml.pending_xids += [(1, 79), (1, 79), (0, 48)]
    assert registry.get_sample_value("DCGM_EXP_XID_ERRORS_COUNT", {**GPU1, "xid": "79"}) == 2
    assert registry.get_sample_value("DCGM_EXP_XID_ERRORS_COUNT", {**GPU0, "xid": "48"}) == 1
    assert registry.get_sample_value("DCGM_FI_DEV_XID_ERRORS", GPU0) == 48


def test_no_driver_keeps_serving_with_the_reason():
    registry = registry_for(FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert registry.get_sample_value("mac_gpu_count") == 0
    reason = "libnvidia-ml.so.1 not found (no NVIDIA driver in this host or container)"
    assert backend_available(registry, "nvml", reason) == 0
    assert registry.get_sample_value("mac_exporter_collector_success", {"collector": "nvml"}) == 1


def test_dcgm_exporter_golden_output():
    assert_golden("dcgm-exporter", scrape_text(registry_for(two_h200s())))
