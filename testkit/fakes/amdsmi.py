"""The amdsmi hardware boundary for the tests: one recorded MI300X, as amdsmi answers.

The values and shapes are amdsmi's (dicts with "N/A" for what a card does not
report, MT/s for PCIe speeds, KB for XGMI). ``python -m testkit.fakes.amdsmi
--port P`` serves rocm-exporter on it, over the amdgpu sysfs fixture, for the
Prometheus dashboard test.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"

NA = "N/A"


class FakeAmdSmi:
    """MI300X cards (SPX partition, 8 HBM stacks, 7 XGMI links, 8 XCCs): one by default.

    With ``count`` > 1 every card answers as the recorded one, under its own handle,
    PCI address, UUID and KFD node (an 8-GPU MI300X platform for the simulated fleet).
    ``token`` (8 hex digits) replaces part of the recorded UUID and serial, so that cards
    of different simulated nodes differ.

    What a test changes between scrapes: ``silent``, the indexes of GPUs whose readings
    fail (amdsmi still names them from what it read at init); ``ecc``, each RAS block's
    counts, and ``failing_blocks``, the blocks whose count fails; ``error``, set, fails
    the listing of the GPUs itself.
    """

    def __init__(self, count: int = 1, token: str = "") -> None:
        self.count = count
        self.token = token
        self.silent: set[int] = set()
        self.ecc = {self.AmdSmiGpuBlock.UMC: ras_counts(correctable=3)}
        self.failing_blocks: set[int] = set()
        self.error = ""

    class AmdSmiException(Exception):
        pass

    AmdSmiTemperatureType = SimpleNamespace(EDGE=0, HOTSPOT=1, VRAM=2)
    AmdSmiTemperatureMetric = SimpleNamespace(CURRENT=0)
    AmdSmiClkType = SimpleNamespace(GFX=0, MEM=1)
    AmdSmiGpuBlock = SimpleNamespace(UMC=0, SDMA=1, GFX=2, MMHUB=3, XGMI_WAFL=4)

    def amdsmi_init(self):
        pass

    def amdsmi_get_processor_handles(self):
        if self.error:
            raise self.AmdSmiException(self.error)
        return [f"h{index}" for index in range(self.count)]

    def _answer(self, h) -> None:
        if _index(h) in self.silent:
            raise self.AmdSmiException("AMDSMI_STATUS_DRM_ERROR - DRM error")

    def amdsmi_get_gpu_asic_info(self, h):
        serial = (
            f"0x2B1C{self.token}{_index(h):02X}"
            if self.token
            else (f"0x2B1C0E9A7F3D50{_index(h):02X}")
        )
        return {"market_name": "AMD Instinct MI300X", "asic_serial": serial}

    def amdsmi_get_gpu_device_bdf(self, h):
        return f"0000:{0x05 + 0x20 * _index(h):02x}:00.0"

    def amdsmi_get_gpu_device_uuid(self, h):
        if self.token:
            return f"5fff74a1-0000-1000-80c3-{self.token}{_index(h):04x}"
        return f"5fff74a1-0000-1000-80c3-2b1c0e9a7f{0x3D + _index(h):02x}"

    def amdsmi_get_gpu_kfd_info(self, h):
        index = _index(h)
        return {"kfd_id": 17094 + index, "node_id": 2 + index, "current_partition_id": 0}

    def amdsmi_get_gpu_activity(self, h):
        self._answer(h)
        return {"gfx_activity": 77, "umc_activity": 12, "mm_activity": NA}

    def amdsmi_get_gpu_vram_usage(self, h):
        self._answer(h)
        return {"vram_total": 196592, "vram_used": 8128}

    def amdsmi_get_temp_metric(self, h, kind, metric):
        self._answer(h)
        if kind == self.AmdSmiTemperatureType.EDGE:
            raise self.AmdSmiException("not supported on MI300X")
        return {1: 55, 2: 40}[kind]

    def amdsmi_get_power_info(self, h):
        self._answer(h)
        return {"average_socket_power": NA, "current_socket_power": 301}

    def amdsmi_get_energy_count(self, h):
        self._answer(h)
        return {"energy_accumulator": 81234567890, "counter_resolution": 15.259, "timestamp": 0}

    def amdsmi_get_gpu_ecc_count(self, h, block):
        self._answer(h)
        if block in self.failing_blocks:
            raise self.AmdSmiException("AMDSMI_STATUS_API_FAILED - API call failed")
        return dict(self.ecc.get(block, ras_counts()))

    def amdsmi_get_pcie_info(self, h):
        self._answer(h)
        return {
            "pcie_static": {"max_pcie_width": 16, "max_pcie_speed": 32000},
            "pcie_metric": {
                "pcie_width": 16,
                "pcie_speed": 32000,
                "pcie_bandwidth": 1840,
                "pcie_replay_count": 0,
                "pcie_l0_to_recovery_count": 1,
                "pcie_replay_roll_over_count": 0,
                "pcie_nak_sent_count": 0,
                "pcie_nak_received_count": 2,
            },
        }

    def amdsmi_get_clock_info(self, h, kind):
        self._answer(h)
        if kind == self.AmdSmiClkType.GFX:
            return {"clk": 1420, "min_clk": 500, "max_clk": 2100, "clk_locked": False}
        return {"clk": 1300, "min_clk": 900, "max_clk": 1300, "clk_locked": NA}

    def amdsmi_get_gpu_metrics_info(self, h):
        self._answer(h)
        return {
            "temperature_hbm": [38, 39, 40, 39, 38, 41, 40, 39],
            "xgmi_read_data_acc": [1048576, 2097152, 0, 0, 0, 0, 0, NA],
            "xgmi_write_data_acc": [524288, 1048576, 0, 0, 0, 0, 0, NA],
            "accumulation_counter": 912345,
            "prochot_residency_acc": 0,
            "ppt_residency_acc": 1200,
            "socket_thm_residency_acc": 0,
            "vr_thm_residency_acc": 0,
            "hbm_thm_residency_acc": 0,
            "xcp_stats": [{"gfx_busy_inst": [80, 76, 79, 77, 74, 78, 81, 75], "jpeg_busy": []}],
        }


def _index(handle: str) -> int:
    return int(handle[1:])


def ras_counts(correctable: int = 0, uncorrectable: int = 0) -> dict[str, int]:
    """One RAS block's answer to amdsmi_get_gpu_ecc_count."""
    return {
        "correctable_count": correctable,
        "uncorrectable_count": uncorrectable,
        "deferred_count": 0,
    }


def main() -> None:
    from exporters.amd import AmdGpuSource
    from exporters.runtime import Exporter
    from exporters.server import bind_socket, serve_exporter
    from node.host import Roots

    ap = argparse.ArgumentParser(description="rocm-exporter on one fake MI300X (amdsmi)")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bind", default="127.0.0.1")
    args = ap.parse_args()
    roots = Roots(
        sys_root=str(FIXTURES / "sysfs-amd"),
        proc_root=str(FIXTURES / "proc"),
        dev_root=str(FIXTURES / "dev-amd"),
    )
    exporter = Exporter("rocm-exporter", [AmdGpuSource(roots, amdsmi=FakeAmdSmi())])
    serve_exporter(exporter, bind_socket(args.bind, args.port))


if __name__ == "__main__":
    main()
