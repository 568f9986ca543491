"""dcgm-exporter: DCGM names, types and labels from NVML, through a fake pynvml module."""

from __future__ import annotations

import re

import pynvml

from exporters.nvidia import NvmlSource, generate_dcgm_latest
from exporters.runtime import Exporter
from node.host import Roots
from testkit.fakes.nvml import FakeNvml, two_h200s
from tests.exporters.conftest import FIXTURES, assert_golden, backend_available
from tests.exporters.dashboards import HERE, load

FIXTURE_ROOTS = Roots(proc_root=str(FIXTURES / "proc"))  # the boot_id of the golden file
SEEN_AT = 1_781_000_000.0  # when the golden file's evidence was seen
UUID0 = "GPU-5d2f7b1e-8c3a-4f6e-9b0d-2a7c1e4f8b93"
UUID1 = "GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
DEFAULT_COUNTERS = load(HERE / "dcgm-exporter-default-counters.yml")
# dcgm-exporter 4.x's /metrics for one counter, as its render template writes it.
DCGM_EXPORTER_COUNTER = """\
# HELP DCGM_FI_DEV_PCIE_REPLAY_COUNTER Total number of PCIe retries.
# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter
DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu="0",UUID="GPU-5d2f7b1e",pci_bus_id="00000000:19:00.0",\
device="nvidia0",modelName="NVIDIA H200",Hostname="gpu-node-17",\
DCGM_FI_DRIVER_VERSION="550.90.07"} 0
"""


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


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def exporter_for(nvml: FakeNvml, clock: Clock | None = None) -> Exporter:
    source = NvmlSource(
        "gpu-node-17", nvml=nvml, clock=clock or Clock(), roots=FIXTURE_ROOTS, wall=lambda: SEEN_AT
    )
    return Exporter("dcgm-exporter", [source], exposition=generate_dcgm_latest)


def registry_for(nvml: FakeNvml):
    return exporter_for(nvml).registry


def test_dcgm_names_units_and_labels():
    registry = registry_for(two_h200s())
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_UTIL", GPU0) == 87
    assert registry.get_sample_value("DCGM_FI_DEV_FB_USED", GPU0) == 81_604_378_624 // 2**20
    assert registry.get_sample_value("DCGM_FI_DEV_FB_FREE", GPU0) == 62_199_955_456 // 2**20
    assert registry.get_sample_value("DCGM_FI_DEV_FB_RESERVED", GPU0) == 522
    assert registry.get_sample_value("DCGM_FI_DEV_POWER_USAGE", GPU0) == 512.345
    assert registry.get_sample_value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", GPU0) == 9_876_543_210
    assert registry.get_sample_value("DCGM_FI_DEV_MEMORY_TEMP", GPU0) == 47
    assert registry.get_sample_value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", GPU0) == 4


def test_codec_remapping_and_licence_fields_follow_dcgm():
    registry = registry_for(two_h200s(enc_util=None, remapped_rows=(7, 2, 1, 1)))
    assert registry.get_sample_value("DCGM_FI_DEV_ENC_UTIL", GPU0) == 0
    assert registry.get_sample_value("DCGM_FI_DEV_DEC_UTIL", GPU0) == 12
    assert registry.get_sample_value("DCGM_FI_DEV_ENC_UTIL", GPU1) is None  # NOT_SUPPORTED
    assert registry.get_sample_value("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", GPU1) == 7
    assert registry.get_sample_value("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", GPU1) == 2
    assert registry.get_sample_value("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU1) == 1
    assert registry.get_sample_value("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU0) == 0
    # Bare metal, no vGPU licensing: DCGM reports 0, not "absent".
    assert registry.get_sample_value("DCGM_FI_DEV_VGPU_LICENSE_STATUS", GPU0) == 0


def test_a_driver_without_memory_v2_still_gives_used_and_free():
    registry = registry_for(two_h200s(memory_v2=False))
    assert registry.get_sample_value("DCGM_FI_DEV_FB_RESERVED", GPU1) is None
    # v1 counts the reserved memory as used.
    assert (
        registry.get_sample_value("DCGM_FI_DEV_FB_USED", GPU1)
        == (81_604_378_624 + 547_356_672) // 2**20
    )
    assert registry.get_sample_value("DCGM_FI_DEV_FB_RESERVED", GPU0) == 522


def test_nvlink_bandwidth_is_dcgm_rate_between_scrapes():
    nvml, clock = two_h200s(), Clock()
    registry = exporter_for(nvml, clock).registry
    # The first read has nothing to compare with: DCGM publishes 0.
    assert registry.get_sample_value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", GPU0) == 0
    nvml.gpus[0].nvlink_tx_kib += 30_000_000
    nvml.gpus[0].nvlink_rx_kib += 10_000_000
    clock.now += 4
    # (40,000,000 KiB / 4 s) / 1000, as DCGM's cache manager computes it.
    assert registry.get_sample_value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", GPU0) == 10_000
    clock.now += 4
    assert registry.get_sample_value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", GPU0) == 0  # idle


def test_profiling_fields_come_from_two_gpm_samples():
    registry = registry_for(two_h200s())
    # One GPM sample is only a baseline: nothing to report yet, but GPM is there.
    assert registry.get_sample_value("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GPU0) is None
    assert registry.get_sample_value("mac_gpu_profiling_available", {**GPU0, "reason": ""}) == 1
    assert registry.get_sample_value("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GPU0) == 0.6125
    assert registry.get_sample_value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU0) == 0.935
    assert registry.get_sample_value("DCGM_FI_PROF_DRAM_ACTIVE", GPU0) == 0.475
    assert registry.get_sample_value("DCGM_FI_PROF_PCIE_TX_BYTES", GPU0) == 1234.5
    assert registry.get_sample_value("DCGM_FI_PROF_PCIE_RX_BYTES", GPU0) == 2345.25


def test_gpus_without_gpm_have_no_profiling_fields_and_say_why():
    registry = registry_for(two_h200s(gpm=None))
    registry.get_sample_value("mac_gpu_count")  # the baseline scrape
    reason = "GPM not supported by this GPU (needs Hopper+)"
    assert registry.get_sample_value("mac_gpu_profiling_available", {**GPU1, "reason": reason}) == 0
    for name in DEFAULT_COUNTERS.metrics:
        if name.startswith("DCGM_FI_PROF_"):
            assert registry.get_sample_value(name, GPU1) is None, name
    assert registry.get_sample_value("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GPU0) == 0.6125


def test_a_failing_gpm_sample_is_the_reason_and_sampling_starts_over():
    nvml = two_h200s(gpm_error=pynvml.NVML_ERROR_NO_PERMISSION)
    registry = registry_for(nvml)
    reason = "nvmlGpmSampleGet: Insufficient Permissions"
    assert registry.get_sample_value("mac_gpu_profiling_available", {**GPU1, "reason": reason}) == 0
    nvml.gpus[1].gpm_error = None
    assert registry.get_sample_value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU1) is None  # new baseline
    assert registry.get_sample_value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU1) == 0.935


def test_not_supported_and_blank_values_are_skipped_not_zero():
    registry = registry_for(two_h200s(blank_power=True))
    assert registry.get_sample_value("DCGM_FI_DEV_MEMORY_TEMP", GPU1) is None
    assert registry.get_sample_value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", GPU1) is None
    assert registry.get_sample_value("DCGM_FI_DEV_POWER_USAGE", GPU1) is None
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_UTIL", GPU1) == 0  # a real zero stays


def test_a_gpu_that_fell_off_the_bus_is_reported_lost():
    nvml = two_h200s()
    registry = registry_for(nvml)
    assert registry.get_sample_value("mac_gpu_lost", GPU1) == 0
    nvml.gpus[1].lost = True
    assert registry.get_sample_value("mac_gpu_lost", GPU1) == 1  # still named as it was
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_TEMP", GPU1) is None
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_TEMP", GPU0) == 54


def test_xid_events_are_counted_per_xid():
    nvml = two_h200s()
    registry = registry_for(nvml)
    assert registry.get_sample_value("DCGM_FI_DEV_XID_ERRORS", GPU0) == 0  # none yet, as DCGM
    assert registry.get_sample_value("DCGM_EXP_XID_ERRORS_COUNT", {**GPU1, "xid": "79"}) is None
    nvml.pending_xids += [(1, 79), (1, 79), (0, 48)]
    assert registry.get_sample_value("DCGM_EXP_XID_ERRORS_COUNT", {**GPU1, "xid": "79"}) == 2
    assert registry.get_sample_value("DCGM_EXP_XID_ERRORS_COUNT", {**GPU0, "xid": "48"}) == 1
    assert registry.get_sample_value("DCGM_FI_DEV_XID_ERRORS", GPU0) == 48
    assert registry.get_sample_value("DCGM_FI_DEV_XID_ERRORS", GPU1) == 79


def test_no_driver_keeps_serving_with_the_reason():
    registry = registry_for(FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert registry.get_sample_value("mac_gpu_count") == 0
    reason = "libnvidia-ml.so.1 not found (no NVIDIA driver in this host or container)"
    assert backend_available(registry, "nvml", reason) == 0
    assert registry.get_sample_value("mac_exporter_collector_success", {"collector": "nvml"}) == 1


def _shape(text: str, name: str) -> tuple[list[str], set[str], set[frozenset[str]]]:
    """One family's shape: its HELP/TYPE lines minus the help text, sample names, label names."""
    comments = []
    for line in text.splitlines():
        if line.startswith(f"# HELP {name} "):
            comments.append(f"# HELP {name}")
        elif line.startswith(f"# TYPE {name} "):
            comments.append(line)
    samples = re.findall(rf"^({name}\w*)\{{(.*)\}} \S+$", text, flags=re.M)
    label_sets = {frozenset(re.findall(r'(\w+)="', labels)) for _, labels in samples}
    return comments, {sample for sample, _ in samples}, label_sets


def test_counters_are_exposed_in_dcgm_exporters_shape():
    exporter = exporter_for(two_h200s())
    exporter.exposition(exporter.registry)  # the GPM baseline
    text = exporter.exposition(exporter.registry).decode()
    assert _shape(text, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER") == _shape(
        DCGM_EXPORTER_COUNTER, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
    )
    for name, kind in DEFAULT_COUNTERS.types.items():
        comments, samples, label_sets = _shape(text, name)
        assert comments == [f"# HELP {name}", f"# TYPE {name} {kind}"], name
        assert samples == {name}, f"{name}: samples named {samples}"
        assert label_sets == {frozenset(DEFAULT_COUNTERS.labels)}, name
    assert "_total" not in "".join(line for line in text.splitlines() if "DCGM_" in line)


def test_dcgm_exporter_golden_output():
    nvml, clock = two_h200s(), Clock()
    exporter = exporter_for(nvml, clock)
    exporter.exposition(exporter.registry)  # the baseline: GPM and NVLink need two reads
    nvml.gpus[0].nvlink_tx_kib += 60_000_000
    nvml.gpus[0].nvlink_rx_kib += 60_000_000
    nvml.pending_xids.append((1, 79))
    clock.now += 15
    assert_golden("dcgm-exporter", exporter.exposition(exporter.registry).decode())
