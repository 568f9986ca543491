"""rocm-exporter: device-metrics-exporter names from amdgpu sysfs or amdsmi."""

from __future__ import annotations

import os

from exporters.amd import AmdGpuSource, parse_modules, read_sysfs_gpus
from exporters.amd_fields import parse_dpm, parse_ras_count
from exporters.runtime import Exporter
from node.host import Roots
from testkit.fakes.amdsmi import FakeAmdSmi
from tests.exporters.conftest import FIXTURES, assert_golden, backend_available, scrape_text

AMD_ROOTS = Roots(
    sys_root=str(FIXTURES / "sysfs-amd"),
    proc_root=str(FIXTURES / "proc"),
    dev_root=str(FIXTURES / "dev-amd"),
)
GPU0 = {
    "gpu_id": "0",
    "gpu_uuid": "2b1c0e9a7f3d5000",
    "gpu_partition_id": "0",
    "serial_number": "2b1c0e9a7f3d5000",
    "card_model": "AMD Instinct MI300X",
    "card_vendor": "AMD",
}
GPU1 = {**GPU0, "gpu_id": "1", "gpu_uuid": "2b1c0e9a7f3d5001", "serial_number": "2b1c0e9a7f3d5001"}
SMI0 = {
    **GPU0,
    "gpu_uuid": "5fff74a1-0000-1000-80c3-2b1c0e9a7f3d",
    "serial_number": "0x2B1C0E9A7F3D5000",
}


SEEN_AT = 1_781_000_000.0  # the evidence's time in the golden file


def registry_for(roots: Roots, amdsmi=False):
    source = AmdGpuSource(roots, amdsmi=amdsmi, wall=lambda: SEEN_AT)
    return Exporter("rocm-exporter", [source]).registry


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


def test_amdsmi_is_used_when_it_imports():
    registry = registry_for(AMD_ROOTS, amdsmi=FakeAmdSmi())
    labels = SMI0
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


def test_parse_ras_count_reads_ue_ce_and_de():
    assert parse_ras_count("ue: 2\nce: 11\nde: 1\n") == {
        "uncorrect": 2.0,
        "correct": 11.0,
        "deferred": 1.0,
    }
    assert parse_ras_count("ue: 0\nce: 3\n") == {"uncorrect": 0.0, "correct": 3.0}


def test_parse_dpm_is_current_lowest_highest():
    assert parse_dpm("0: 500Mhz\n1: 1420Mhz *\n2: 2100Mhz\n") == (1420.0, 500.0, 2100.0)
    assert parse_dpm("0: 500Mhz\n") is None  # no current level marked


def test_sysfs_gives_per_block_ecc_pcie_clocks_and_health():
    registry = registry_for(AMD_ROOTS)
    assert registry.get_sample_value("gpu_ecc_correct_umc", GPU0) == 3
    assert registry.get_sample_value("gpu_ecc_correct_bif", GPU0) == 0  # the driver's pcie_bif
    assert registry.get_sample_value("gpu_ecc_correct_total", GPU0) == 4  # umc 3 + gfx 1
    assert registry.get_sample_value("gpu_ecc_uncorrect_total", GPU1) == 2
    assert registry.get_sample_value("gpu_health", GPU0) == 1
    assert registry.get_sample_value("gpu_health", GPU1) == 0  # uncorrectable ECC errors
    assert registry.get_sample_value("pcie_replay_count", GPU1) == 17
    assert registry.get_sample_value("pcie_max_speed", GPU0) == 32.0
    gfx = {**GPU0, "clock_index": "0", "clock_type": "system"}
    assert registry.get_sample_value("gpu_clock", gfx) == 1420
    assert registry.get_sample_value("gpu_max_clock", gfx) == 2100
    # What only amdsmi knows is absent, not zero.
    assert registry.get_sample_value("gpu_hbm_temperature", {**GPU0, "hbm_index": "0"}) is None


def test_amdsmi_gives_xgmi_violation_hbm_and_busy_per_xcc():
    registry = registry_for(AMD_ROOTS, amdsmi=FakeAmdSmi())
    assert registry.get_sample_value("gpu_ecc_correct_umc", SMI0) == 3
    assert registry.get_sample_value("pcie_speed", SMI0) == 32.0  # 32000 MT/s
    assert registry.get_sample_value("pcie_bandwidth", SMI0) == 1840
    assert registry.get_sample_value("pcie_recovery_count", SMI0) == 1
    assert registry.get_sample_value("pcie_nack_received_count", SMI0) == 2
    assert registry.get_sample_value("gpu_hbm_temperature", {**SMI0, "hbm_index": "5"}) == 41
    assert registry.get_sample_value("gpu_xgmi_link_rx", {**SMI0, "link_index": "1"}) == 2097152
    # "N/A" links are left out, not reported as 0.
    assert registry.get_sample_value("gpu_xgmi_link_tx", {**SMI0, "link_index": "7"}) is None
    assert registry.get_sample_value("gpu_violation_ppt_residency_accumulated", SMI0) == 1200
    busy = {**SMI0, "xcc_index": "7"}
    assert registry.get_sample_value("gpu_gfx_busy_instantaneous", busy) == 75
    mem = {**SMI0, "clock_index": "1", "clock_type": "memory"}
    assert registry.get_sample_value("gpu_clock", mem) == 1300
    assert registry.get_sample_value("gpu_health", SMI0) == 1
    assert registry.get_sample_value("gpu_energy_consumed", SMI0) == 81234567890 * 15.259


def test_no_label_collides_with_macs_target_labels():
    """hostname and cluster_name come from MAC's targets; the exporter never sets them."""
    registry = registry_for(AMD_ROOTS, amdsmi=FakeAmdSmi())
    labels = {name for metric in registry.collect() for s in metric.samples for name in s.labels}
    assert not labels & {"hostname", "cluster_name", "node", "gpu_vendor", "maintenance"}
