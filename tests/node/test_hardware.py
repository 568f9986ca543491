"""The node's hardware discovery: RDMA devices, interfaces and port counters from sysfs.

The fixture tree tests/fixtures/sysfs-ib holds one NIC of each family: ConnectX (mlx5),
Thor2 (bnxt_re), an Intel irdma and a GPUBoost without a verbs device.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from node.hardware import (
    PortCounters,
    detect_gpus,
    discover_interfaces,
    discover_rdma_devices,
    parse_ib_rate,
    parse_ib_state,
    read_port_counters,
)
from node.host import Roots

IB_ROOTS = Roots(sys_root=str(Path(__file__).resolve().parents[1] / "fixtures" / "sysfs-ib"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4: ACTIVE", (4, "ACTIVE")), ("1: DOWN\n", (1, "DOWN")), ("garbage", None)],
)
def test_parse_ib_state(text, expected):
    assert parse_ib_state(text) == expected


def test_parse_ib_rate_is_bytes_per_second():
    assert parse_ib_rate("400 Gb/sec (4X NDR)") == 50e9
    assert parse_ib_rate("2.5 Gb/sec (1X SDR)") == 2.5e9 / 8
    assert parse_ib_rate("") is None


def test_vendors_are_told_apart_from_sysfs_drivers_and_ids():
    found = {dev.device: dev for dev in discover_rdma_devices(IB_ROOTS)}
    assert found["mlx5_0"].vendor == "mellanox" and found["mlx5_0"].iface == "ens1f0np0"
    assert found["bnxt_re0"].vendor == "broadcom" and found["bnxt_re0"].pci_id == "0x14e4:0x1760"
    assert found["irdma0"].vendor == "intel"
    # No verbs device: found through its driver, named by its interface only.
    mango = next(dev for dev in found.values() if dev.iface == "enp65s0")
    assert (mango.device, mango.vendor) == ("", "mangoboost")


def test_interfaces_know_their_rdma_device_from_the_one_ib_walk():
    found = {nic.name: nic for nic in discover_interfaces(IB_ROOTS)}
    assert sorted(found) == ["enp65s0", "ens1f0np0", "ens1f1np1", "ens2f0np0", "ens3f0"]
    assert found["ens1f0np0"].ibdev == "mlx5_0" and found["ens2f0np0"].ibdev == "bnxt_re0"
    # GPUBoost has no IB device: it is found through its driver, not given an ibdev.
    mango = found["enp65s0"]
    assert (mango.ibdev, mango.physical, mango.speed_mbps) == ("", True, 200000)
    assert (mango.operstate, mango.driver) == ("up", "mango_gpuboost")


def test_port_counters_come_from_the_best_source_in_bytes():
    assert read_port_counters(IB_ROOTS, "bnxt_re0", "1") == PortCounters(
        "hw_counters/rx_bytes", "hw_counters/tx_bytes", 37384362467952, 37294508603607
    )
    # Standard IB counters count 4-byte words.
    assert read_port_counters(IB_ROOTS, "irdma0", "1") == PortCounters(
        "counters/port_rcv_data", "counters/port_xmit_data", 2500000000 * 4, 1250000000 * 4
    )
    assert read_port_counters(IB_ROOTS, "mlx5_1", "1") is None


@pytest.mark.parametrize(
    ("vendor", "pci_class", "found"),
    [
        ("0x1002", "0x120000", ("amd", 1)),  # an Instinct MI300: a processing accelerator
        ("0x10de", "0x030200", ("nvidia", 1)),  # a 3D controller
        ("0x1002", "0x040300", ("none", 0)),  # the same vendor's audio function
    ],
)
def test_a_gpu_the_driver_never_bound_is_counted_by_its_pci_class(
    tmp_path, vendor, pci_class, found
):
    device = tmp_path / "sys/bus/pci/devices/0000:c1:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"{vendor}\n")
    (device / "class").write_text(f"{pci_class}\n")
    roots = Roots(
        sys_root=str(tmp_path / "sys"), proc_root=str(tmp_path / "proc"), dev_root=str(tmp_path)
    )

    assert detect_gpus(roots) == found
