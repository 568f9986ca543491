"""rocm-exporter: device-metrics-exporter names from amdgpu sysfs or amdsmi."""

from __future__ import annotations

import os
from types import SimpleNamespace

from exporters.amd import AmdGpuSource, parse_modules, read_sysfs_gpus
from exporters.runtime import Exporter, Roots
from tests.exporters.conftest import FIXTURES, assert_golden, backend_available, scrape_text

AMD_ROOTS = Roots(
    sys_root=str(FIXTURES / "sysfs-amd"),
    proc_root=str(FIXTURES / "proc"),
    dev_root=str(FIXTURES / "dev-amd"),
)
GPU0 = {
    "gpu_id": "0",
    "serial_number": "2b1c0e9a7f3d5000",
    "card_model": "AMD Instinct MI300X",
    "card_vendor": "AMD",
    "hostname": "gpu-node-17",
}


def registry_for(roots: Roots, amdsmi=False):
    return Exporter("rocm-exporter", [AmdGpuSource(roots, "gpu-node-17", amdsmi=amdsmi)]).registry


def test_parse_modules_lists_loaded_modules():
    modules = parse_modules((FIXTURES / "proc" / "modules").read_text())
    assert {"amdgpu", "mlx5_core", "bnxt_re"} <= modules


def test_sysfs_gpus_skip_other_vendors_and_connectors():
    gpus = read_sysfs_gpus(AMD_ROOTS)
    assert [g.card for g in gpus] == ["card1", "card2"]  # card0 is the BMC's ASPEED VGA
    assert gpus[0].pci_address == "0000:05:00.0"
    assert gpus[0].temperatures == {"edge": 41.0, "junction": 52.0, "memory": 39.0}
    assert gpus[0].power_average_w == 298.0


def test_device_metrics_exporter_names_and_units():
    registry = registry_for(AMD_ROOTS)
    assert registry.get_sample_value("gpu_gfx_activity", GPU0) == 98
    assert registry.get_sample_value("gpu_used_vram", GPU0) == 8522825728 / 2**20
    assert registry.get_sample_value("gpu_total_vram", GPU0) == 196592.0
    assert registry.get_sample_value("gpu_junction_temperature", GPU0) == 52
    assert registry.get_sample_value("gpu_power_usage", GPU0) == 298
    assert registry.get_sample_value("gpu_nodes_total") == 2
    assert backend_available(registry, "amdgpu") == 1


def test_rocm_exporter_golden_output():
    assert_golden("rocm-exporter", scrape_text(registry_for(AMD_ROOTS)))


def test_missing_kfd_is_reported_with_the_reason(tmp_path):
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    registry = registry_for(Roots(AMD_ROOTS.sys_root, AMD_ROOTS.proc_root, str(dev)))
    reason = f"{dev}/kfd missing (pass --device=/dev/kfd to the container)"
    assert backend_available(registry, "amdgpu", reason) == 0
    assert registry.get_sample_value("gpu_gfx_activity", GPU0) == 98  # sysfs still readable


def test_missing_dri_and_missing_module_are_reported(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "kfd").touch()
    registry = registry_for(Roots(AMD_ROOTS.sys_root, AMD_ROOTS.proc_root, str(dev)))
    reason = f"{dev}/dri missing (pass --device=/dev/dri to the container)"
    assert backend_available(registry, "amdgpu", reason) == 0
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "modules").write_text("mlx5_core 2519040 1 mlx5_ib, Live 0x0\n")
    registry = registry_for(Roots(AMD_ROOTS.sys_root, str(proc), AMD_ROOTS.dev_root))
    reason = "amdgpu kernel module not loaded (sudo modprobe amdgpu)"
    assert backend_available(registry, "amdgpu", reason) == 0


class FakeAmdSmi:
    """The amdsmi hardware boundary: two calls' worth of one MI300X."""

    class AmdSmiException(Exception):
        pass

    AmdSmiTemperatureType = SimpleNamespace(EDGE=0, HOTSPOT=1, VRAM=2)
    AmdSmiTemperatureMetric = SimpleNamespace(CURRENT=0)

    def amdsmi_init(self):
        pass

    def amdsmi_get_processor_handles(self):
        return ["h0"]

    def amdsmi_get_gpu_asic_info(self, h):
        return {"market_name": "AMD Instinct MI300X", "asic_serial": "0x2B1C0E9A7F3D5000"}

    def amdsmi_get_gpu_device_bdf(self, h):
        return "0000:05:00.0"

    def amdsmi_get_gpu_activity(self, h):
        return {"gfx_activity": 77, "umc_activity": 12, "mm_activity": "N/A"}

    def amdsmi_get_gpu_vram_usage(self, h):
        return {"vram_total": 196592, "vram_used": 8128}

    def amdsmi_get_temp_metric(self, h, kind, metric):
        if kind == self.AmdSmiTemperatureType.EDGE:
            raise self.AmdSmiException("not supported on MI300X")
        return {1: 55, 2: 40}[kind]

    def amdsmi_get_power_info(self, h):
        return {"average_socket_power": "N/A", "current_socket_power": 301}


def test_amdsmi_is_used_when_it_imports():
    registry = registry_for(AMD_ROOTS, amdsmi=FakeAmdSmi())
    labels = {**GPU0, "serial_number": "0x2B1C0E9A7F3D5000"}
    assert registry.get_sample_value("gpu_gfx_activity", labels) == 77
    assert registry.get_sample_value("gpu_used_vram", labels) == 8128
    assert registry.get_sample_value("gpu_edge_temperature", labels) is None  # unsupported
    assert registry.get_sample_value("gpu_junction_temperature", labels) == 55
    assert registry.get_sample_value("gpu_package_power", labels) == 301
    assert registry.get_sample_value("gpu_average_package_power", labels) is None  # "N/A"
    assert backend_available(registry, "amdsmi") == 1


def test_rocm_exporter_on_this_machine_serves_and_says_why(tmp_path):
    registry = registry_for(Roots())
    assert registry.get_sample_value("mac_exporter_collector_success", {"collector": "amdgpu"}) == 1
    backend = next(
        s for m in registry.collect() if m.name == "mac_exporter_backend_available"
        for s in m.samples if s.labels["backend"] == "amdgpu"
    )  # fmt: skip
    if os.path.exists("/dev/kfd") and backend.value == 1:
        assert registry.get_sample_value("gpu_nodes_total") >= 1
    else:
        assert backend.value == 0 and backend.labels["reason"]


def test_a_failing_amdsmi_init_falls_back_to_sysfs_with_the_reason():
    class BrokenInit(FakeAmdSmi):
        def amdsmi_init(self):
            raise self.AmdSmiException("AMDSMI_STATUS_DRIVER_NOT_LOADED")

    registry = registry_for(AMD_ROOTS, amdsmi=BrokenInit())
    assert registry.get_sample_value("gpu_gfx_activity", GPU0) == 98  # from sysfs
    reason = "amdsmi_init failed: AMDSMI_STATUS_DRIVER_NOT_LOADED; reading amdgpu sysfs"
    assert backend_available(registry, "amdsmi", reason) == 0
