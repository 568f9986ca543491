"""nic-exporter on InfiniBand sysfs trees that MAC did not write.

* Debian's ``golang-github-prometheus-procfs-dev`` 0.8.0-3: a slice of procfs's test tree,
  committed under tests/fixtures/captured/debian-golang-procfs/ (an Omni-Path ``hfi1_0``,
  a two-port ConnectX-3 ``mlx4_0`` and an Ethernet ``eth0``). Always runs.
* procfs's newer tree (a ConnectX-4 ``mlx5_0`` with ``hw_counters``) and node_exporter's
  tree and output: read from the captures folder (tests/fixtures/captured/MANIFEST.md);
  skipped, with the file named, where it is not there.

The values written in the tests were read by hand from the raw files; a sysfs
``port_*_data`` counts 4-byte words ("Total number of data octets, divided by 4", the
kernel's Documentation/ABI/stable/sysfs-class-infiniband), hence the ``4 *``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporters.infiniband import InfinibandSource
from exporters.nic import RdmaSource
from exporters.runtime import Exporter
from node.hardware import (
    NetInterface,
    PortCounters,
    discover_interfaces,
    discover_rdma_devices,
    read_port_counters,
)
from node.host import Roots
from testkit.ttar import extract, read_archive, slice_archive
from tests.exporters.captures import capture
from tests.exporters.conftest import FIXTURES

DEBIAN = FIXTURES / "captured" / "debian-golang-procfs" / "sys.ttar"
# Where the package installs procfs's tree, and how sys.ttar was cut from it.
PACKAGED = Path("/usr/share/gocode/src/github.com/prometheus/procfs")
PACKAGED_TTAR = PACKAGED / "testdata" / "fixtures.ttar"
SLICED = (
    "fixtures/sys/class/infiniband",
    "fixtures/sys/class/net",
    "fixtures/sys/devices/pci0000:00/0000:00:1f.6",
)
HEADER = (
    "golang-github-prometheus-procfs-dev 0.8.0-3: testdata/fixtures.ttar, entries under "
    + ", ".join(SLICED)
)
NODE_EXPORTER_OUTPUT = re.compile(r"^(# (HELP|TYPE) )?node_infiniband_")


@pytest.fixture
def debian(tmp_path) -> Roots:
    extract(DEBIAN, tmp_path, "fixtures/sys")
    return Roots(sys_root=str(tmp_path))


def _infiniband_tree(tmp_path_factory, name: str, archive: str, inside: str) -> Roots:
    """The class/infiniband part of a captured ttar archive as a sysfs root."""
    root = tmp_path_factory.mktemp(name)
    extract(capture(archive), root / "class" / "infiniband", inside)
    return Roots(sys_root=str(root))


@pytest.fixture(scope="module")
def procfs(tmp_path_factory) -> Roots:
    return _infiniband_tree(
        tmp_path_factory, "procfs", "prometheus/procfs/testdata/fixtures.ttar",
        "fixtures/sys/class/infiniband",
    )  # fmt: skip


@pytest.fixture(scope="module")
def node_exporter(tmp_path_factory) -> Roots:
    return _infiniband_tree(
        tmp_path_factory, "node_exporter", "prometheus/node_exporter/collector/fixtures/sys.ttar",
        "sys/class/infiniband",
    )  # fmt: skip


def no_ethtool(iface: str) -> str:
    raise RuntimeError(f"ethtool -S {iface}: no such device")


def nic_exporter(roots: Roots) -> Exporter:
    sources = [RdmaSource(roots, ethtool=no_ethtool), InfinibandSource(roots)]
    return Exporter("nic-exporter", sources)


def port(device: str, number: str = "1") -> dict:
    return {"device": device, "port": number}


def rdma(device: str, number: str = "1") -> dict:
    # These trees have no device/ link to a PCI function: no driver, no interface,
    # so the vendor cannot be told and the labels say so.
    return {"device": device, "port": number, "vendor": "unknown", "iface": ""}


# --- Debian's packaged procfs tree (committed) ---------------------------------------


def test_debian_procfs_data_counters_are_four_byte_words(debian):
    registry = nic_exporter(debian).registry
    # hfi1_0/ports/1/counters: port_rcv_data 345091702026, port_xmit_data 273558326543 words.
    # 4 * 345091702026 = 1380366808104 bytes; 4 * 273558326543 = 1094233306172 bytes.
    assert registry.get_sample_value("rdma_rx_bytes_total", rdma("hfi1_0")) == 1380366808104
    assert registry.get_sample_value("rdma_tx_bytes_total", rdma("hfi1_0")) == 1094233306172
    # mlx4_0 port 1: 2221223609 and 26509113295 words -> 8884894436 and 106036453180 bytes.
    # (26509113295 is past 2**32: a kernel of 4.5 or later, 64-bit counters/.)
    family = "node_infiniband_port_data_received_bytes_total"
    assert registry.get_sample_value(family, port("mlx4_0")) == 4 * 2221223609 == 8884894436
    assert registry.get_sample_value("rdma_tx_bytes_total", rdma("mlx4_0")) == 106036453180
    # mlx4_0 port 2: 2460436784 and 26540356890 words -> 9841747136 and 106161427560 bytes.
    assert read_port_counters(debian, "mlx4_0", "2") == PortCounters(
        "counters/port_rcv_data", "counters/port_xmit_data", 9841747136, 106161427560
    )
    # Packets are packets: port_rcv_packets 638036947 on hfi1_0, no factor.
    packets = "node_infiniband_port_packets_received_total"
    assert registry.get_sample_value(packets, port("hfi1_0")) == 638036947


def test_debian_procfs_rates_states_and_device_info(debian):
    registry = nic_exporter(debian).registry
    # hfi1_0: "100 Gb/sec (4X EDR)" -> 100e9 / 8 = 12.5e9 B/s; mlx4_0: "40 Gb/sec (4X QDR)" -> 5e9.
    assert registry.get_sample_value("rdma_link_rate_bytes_per_second", rdma("hfi1_0")) == 12.5e9
    rate = "node_infiniband_rate_bytes_per_second"
    assert registry.get_sample_value(rate, port("mlx4_0", "2")) == 40e9 / 8
    # state "4: ACTIVE", phys_state "5: LinkUp" on every port.
    for device, number in (("hfi1_0", "1"), ("mlx4_0", "1"), ("mlx4_0", "2")):
        assert registry.get_sample_value("rdma_link_up", rdma(device, number)) == 1
        assert registry.get_sample_value("rdma_link_state_id", rdma(device, number)) == 4
        physical = "node_infiniband_physical_state_id"
        assert registry.get_sample_value(physical, port(device, number)) == 5
    # port_xmit_wait 3599 (port 1) and 3846 (port 2) on the ConnectX-3.
    wait = "node_infiniband_port_transmit_wait_total"
    assert registry.get_sample_value(wait, port("mlx4_0", "2")) == 3846
    # board_id, fw_ver and hca_type as the files hold them; hfi1_0 has no hca_type file.
    info = {"device": "mlx4_0", "board_id": "SM_1141000001000"}
    info |= {"firmware_version": "2.31.5050", "hca_type": "MT4099"}
    assert registry.get_sample_value("node_infiniband_info", info) == 1
    found = {dev.device: dev for dev in discover_rdma_devices(debian)}
    assert sorted(found) == ["hfi1_0", "mlx4_0"]
    assert [p.port for p in found["mlx4_0"].ports] == ["1", "2"]
    assert found["hfi1_0"].firmware == "1.27.0"


def test_debian_procfs_ethernet_interface_is_inventoried_and_not_rdma(debian):
    # class/net/eth0: address 01:01:01:01:01:01, operstate up, mtu 1500, speed 1000; its
    # device link leads to the PCI function 0000:00:1f.6 (8086:15d7), which has no driver link.
    assert discover_interfaces(debian) == [
        NetInterface(
            name="eth0",
            mac_address="01:01:01:01:01:01",
            operstate="up",
            mtu=1500,
            speed_mbps=1000,
            driver="",
            physical=True,
            ibdev="",
        )
    ]
    assert "" not in {dev.device for dev in discover_rdma_devices(debian)}


@pytest.mark.skipif(not PACKAGED_TTAR.is_file(), reason=f"{PACKAGED_TTAR} is not installed")
def test_the_committed_tree_is_a_verbatim_slice_of_debians_package():
    """scripts/bootstrap installs the package; the committed slice must be its bytes."""
    cut = slice_archive(read_archive(PACKAGED_TTAR), SLICED, HEADER)
    assert read_archive(DEBIAN) == cut


@pytest.mark.skipif(not PACKAGED_TTAR.is_file(), reason=f"{PACKAGED_TTAR} is not installed")
def test_procfs_own_test_in_the_package_reads_the_same_bytes(debian):
    """A second reader: procfs's Go test states the bytes it expects from the same files."""
    source = (PACKAGED / "sysfs" / "class_infiniband_test.go").read_text()

    def expected(name: str) -> int:
        match = re.search(rf"\b{name}\s+uint64 = (\d+)", source)
        assert match, f"{name} not found in procfs's class_infiniband_test.go"
        return int(match.group(1))

    registry = nic_exporter(debian).registry
    for name, family, labels in (
        ("hfi1Port1PortRcvData", "rdma_rx_bytes_total", rdma("hfi1_0")),
        ("hfi1Port1PortXmitData", "rdma_tx_bytes_total", rdma("hfi1_0")),
        ("mlx4Port1PortRcvData", "rdma_rx_bytes_total", rdma("mlx4_0")),
        ("mlx4Port2PortXmitData", "rdma_tx_bytes_total", rdma("mlx4_0", "2")),
    ):
        assert registry.get_sample_value(family, labels) == expected(name), name


# --- procfs's newer tree: mlx5 hw_counters (captures folder) -------------------------


def test_procfs_mlx5_data_counters_are_four_byte_words(procfs):
    registry = nic_exporter(procfs).registry
    # mlx5_0/ports/1/counters/port_rcv_data is 18126345378 words, port_xmit_data 2880761508848.
    for family in ("node_infiniband_port_data_received_bytes_total", "rdma_rx_bytes_total"):
        labels = rdma("mlx5_0") if family.startswith("rdma") else port("mlx5_0")
        assert registry.get_sample_value(family, labels) == 4 * 18126345378 == 72505381512
    assert registry.get_sample_value("rdma_tx_bytes_total", rdma("mlx5_0")) == 4 * 2880761508848
    assert read_port_counters(procfs, "mlx5_0", "1") == PortCounters(
        "counters/port_rcv_data", "counters/port_xmit_data", 72505381512, 11523046035392
    )


def test_procfs_mlx5_hw_counters_land_in_node_exporter_families(procfs):
    registry = nic_exporter(procfs).registry
    # hw_counters/local_ack_timeout_err 131, duplicate_request 41, req_cqe_error 3481,
    # resp_cqe_error 8109, rx_read_requests 175528982: events, reported as they are.
    for family, value in (
        ("node_infiniband_local_ack_timeout_errors_total", 131),
        ("node_infiniband_duplicate_requests_packets_total", 41),
        ("node_infiniband_req_cqes_errors_total", 3481),
        ("node_infiniband_resp_cqes_errors_total", 8109),
        ("node_infiniband_rx_read_requests_total", 175528982),
    ):
        assert registry.get_sample_value(family, port("mlx5_0")) == value, family
    # No CNP counter in this capture: the family is absent, never a made-up 0.
    cnp = registry.get_sample_value("node_infiniband_np_cnp_packets_sent_total", port("mlx5_0"))
    assert cnp is None


def test_procfs_mlx5_port_state_rate_and_firmware(procfs):
    registry = nic_exporter(procfs).registry
    # mlx5_0: "25 Gb/sec (1X EDR)", "4: ACTIVE", phys_state "4: ACTIVE" (as captured).
    rate = "node_infiniband_rate_bytes_per_second"
    assert registry.get_sample_value(rate, port("mlx5_0")) == 25e9 / 8
    assert registry.get_sample_value("node_infiniband_physical_state_id", port("mlx5_0")) == 4
    assert registry.get_sample_value("rdma_link_up", rdma("mlx5_0")) == 1
    found = {dev.device: dev for dev in discover_rdma_devices(procfs)}
    assert sorted(found) == ["hfi1_0", "mlx4_0", "mlx5_0"]
    assert found["mlx5_0"].firmware == "14.28.2006"


# --- node_exporter's tree and its own output (captures folder) ----------------------


def test_node_infiniband_families_match_node_exporters_own_output(node_exporter):
    """Same tree, same numbers: MAC's node_infiniband_* is what node_exporter printed."""
    output = capture("prometheus/node_exporter/collector/fixtures/e2e-output.txt").read_text()
    lines = [line for line in output.splitlines() if NODE_EXPORTER_OUTPUT.match(line)]
    theirs = {family.name: family for family in text_string_to_metric_families("\n".join(lines))}
    ours = {
        family.name: family
        for family in nic_exporter(node_exporter).registry.collect()
        if family.name.startswith("node_infiniband_")
    }
    assert sorted(ours) == sorted(theirs)
    for name, family in theirs.items():
        assert (ours[name].type, ours[name].documentation) == (family.type, family.documentation)
        assert sorted((s.name, sorted(s.labels.items()), s.value) for s in ours[name].samples) == (
            sorted((s.name, sorted(s.labels.items()), s.value) for s in family.samples)
        ), name


def test_legacy_64_bit_counters_are_read_before_the_32_bit_ones(node_exporter):
    # mlx4_0 port 2: counters/port_rcv_data says 0, counters_ext/port_rcv_data_64 4631917
    # words. Kernels before 4.5 only count past 2**32 in counters_ext.
    assert read_port_counters(node_exporter, "mlx4_0", "2") == PortCounters(
        "counters_ext/port_rcv_data_64",
        "counters_ext/port_xmit_data_64",
        4 * 4631917,
        4 * 3733440,
    )
    registry = nic_exporter(node_exporter).registry
    assert registry.get_sample_value("rdma_rx_bytes_total", rdma("mlx4_0", "2")) == 18527668
    # The 32-bit counters stick at their maximum: port_xmit_wait is 4294967295 there.
    wait = registry.get_sample_value("node_infiniband_port_transmit_wait_total", port("mlx4_0"))
    assert wait == 2**32 - 1


def test_a_port_without_a_pma_is_flagged_and_the_others_still_read(node_exporter):
    # i40iw0's counters all read "N/A (no PMA)": no bytes to report for it.
    registry = nic_exporter(node_exporter).registry
    ok = {"device": "i40iw0", "vendor": "unknown", "iface": ""}
    assert registry.get_sample_value("mac_nic_device_ok", ok) == 0
    assert registry.get_sample_value("rdma_rx_bytes_total", rdma("i40iw0")) is None
    assert registry.get_sample_value("rdma_link_up", rdma("i40iw0")) == 1
    assert registry.get_sample_value("mac_nic_device_ok", {**ok, "device": "mlx4_0"}) == 1
    assert registry.get_sample_value("mac_exporter_collector_success", {"collector": "rdma"}) == 1
