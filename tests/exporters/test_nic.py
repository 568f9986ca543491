"""nic-exporter: ethtool and sysfs RDMA counters of every vendor in one family."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from exporters.infiniband import InfinibandSource
from exporters.nic import RdmaSource, parse_ethtool_stats, rdma_bytes_from_ethtool
from exporters.runtime import Exporter
from node.host import Roots
from tests.exporters.conftest import (
    FIXTURES,
    assert_golden,
    backend_available,
    fixture_ethtool,
    scrape_text,
)

IB_ROOTS = Roots(sys_root=str(FIXTURES / "sysfs-ib"))


def labels(device: str, vendor: str, iface: str, port: str = "1") -> dict:
    return {"device": device, "port": port, "vendor": vendor, "iface": iface}


def ok_labels(device: str, vendor: str, iface: str) -> dict:
    return {"device": device, "vendor": vendor, "iface": iface}


def test_parse_ethtool_stats_of_a_connectx():
    stats = parse_ethtool_stats((FIXTURES / "ethtool" / "ens1f0np0.txt").read_text())
    assert stats["rx_vport_rdma_unicast_bytes"] == 34122601377792
    assert stats["tx_vport_rdma_unicast_bytes"] == 33987440035840
    assert rdma_bytes_from_ethtool("mellanox", stats) == {
        "rx": 34122601377792 + 4608,
        "tx": 33987440035840,
    }


def test_parse_ethtool_stats_of_a_thor2_keeps_queue_prefixes():
    stats = parse_ethtool_stats((FIXTURES / "ethtool" / "ens2f0np0.txt").read_text())
    assert stats["[0]: rx_ucast_bytes"] == 188322016
    assert stats["[1]: rx_ucast_bytes"] == 160012983
    assert stats["rx_bytes"] == 37384711022592
    # Thor2's ethtool has no RDMA byte counters: its bandwidth comes from hw_counters.
    assert rdma_bytes_from_ethtool("mellanox", stats) is None


def test_mangoboost_rdma_counters_are_summed():
    stats = parse_ethtool_stats((FIXTURES / "ethtool" / "enp65s0.txt").read_text())
    assert rdma_bytes_from_ethtool("mangoboost", stats) == {
        "rx": 1048576000000 + 1048575990272,
        "tx": 1042677760000 * 2,
    }


def test_every_vendor_lands_in_one_family():
    registry = Exporter("nic-exporter", [RdmaSource(IB_ROOTS, ethtool=fixture_ethtool)]).registry
    rx = "rdma_rx_bytes_total"
    assert registry.get_sample_value(rx, labels("mlx5_0", "mellanox", "ens1f0np0")) == (
        34122601377792 + 4608
    )
    assert registry.get_sample_value(rx, labels("bnxt_re0", "broadcom", "ens2f0np0")) == (
        37384362467952
    )
    # Standard IB counters count 4-byte words.
    assert registry.get_sample_value(rx, labels("irdma0", "intel", "ens3f0")) == 2500000000 * 4
    assert (
        registry.get_sample_value(
            "rdma_link_rate_bytes_per_second", labels("bnxt_re0", "broadcom", "ens2f0np0")
        )
        == 50e9
    )


def test_one_odd_device_never_breaks_the_others():
    # mlx5_1: ethtool fails and sysfs has no counters at all.
    registry = Exporter("nic-exporter", [RdmaSource(IB_ROOTS, ethtool=fixture_ethtool)]).registry
    assert (
        registry.get_sample_value("mac_nic_device_ok", ok_labels("mlx5_1", "mellanox", "ens1f1np1"))
        == 0
    )
    assert (
        registry.get_sample_value("rdma_rx_bytes_total", labels("mlx5_1", "mellanox", "ens1f1np1"))
        is None
    )
    assert registry.get_sample_value("rdma_link_up", labels("mlx5_1", "mellanox", "ens1f1np1")) == 0
    assert (
        registry.get_sample_value("mac_nic_device_ok", ok_labels("mlx5_0", "mellanox", "ens1f0np0"))
        == 1
    )
    assert registry.get_sample_value("mac_exporter_collector_success", {"collector": "rdma"}) == 1


def test_nic_exporter_golden_output():
    exporter = Exporter(
        "nic-exporter",
        [RdmaSource(IB_ROOTS, ethtool=fixture_ethtool), InfinibandSource(IB_ROOTS)],
    )
    assert_golden("nic-exporter", scrape_text(exporter.registry))


def test_the_device_label_is_the_verbs_device_for_every_vendor():
    registry = Exporter("nic-exporter", [RdmaSource(IB_ROOTS, ethtool=fixture_ethtool)]).registry
    devices = {
        s.labels["iface"]: s.labels["device"]
        for metric in registry.collect()
        if metric.name == "rdma_rx_bytes"
        for s in metric.samples
    }
    assert devices == {
        "ens1f0np0": "mlx5_0",
        "ens2f0np0": "bnxt_re0",
        "ens3f0": "irdma0",
        "enp65s0": "",  # GPUBoost has no verbs device: no interface name passed off as one
    }


def ib(device: str, port: str = "1") -> dict:
    return {"device": device, "port": port}


def test_port_error_counters_have_node_exporters_names():
    registry = Exporter("nic-exporter", [InfinibandSource(IB_ROOTS)]).registry
    value = registry.get_sample_value
    assert value("node_infiniband_symbol_error_total", ib("mlx5_0")) == 12
    assert value("node_infiniband_port_errors_received_total", ib("mlx5_0")) == 3
    assert value("node_infiniband_link_downed_total", ib("mlx5_0")) == 1
    assert value("node_infiniband_link_error_recovery_total", ib("mlx5_0")) == 2
    assert value("node_infiniband_port_discards_transmitted_total", ib("mlx5_0")) == 7
    assert value("node_infiniband_port_transmit_wait_total", ib("mlx5_0")) == 991234
    assert value("node_infiniband_port_packets_received_total", ib("mlx5_0")) == 8470988612
    # port_rcv_data counts 4-byte words; node_exporter reports bytes.
    assert value("node_infiniband_port_data_received_bytes_total", ib("irdma0")) == 2500000000 * 4
    assert value("node_infiniband_state_id", ib("mlx5_1")) == 1
    assert value("node_infiniband_physical_state_id", ib("mlx5_0")) == 5
    assert value("node_infiniband_rate_bytes_per_second", ib("mlx5_0")) == 50e9
    info = {"device": "mlx5_0", "board_id": "MT_0000000838", "hca_type": "MT4129"}
    assert value("node_infiniband_info", {**info, "firmware_version": "28.39.1002"}) == 1


def test_roce_congestion_counters_of_mlx5_and_bnxt_re_share_families():
    registry = Exporter("nic-exporter", [InfinibandSource(IB_ROOTS)]).registry
    value = registry.get_sample_value
    for family, mlx5, bnxt in (
        ("np_cnp_packets_sent", 1234, 777),
        ("rp_cnp_packets_handled", 5321, 888),
        ("out_of_sequence_packets_received", 44, 5),
        ("packet_sequence_errors", 9, 4),
        ("local_ack_timeout_errors", 2, 3),
    ):
        name = f"node_infiniband_{family}_total"
        assert (value(name, ib("mlx5_0")), value(name, ib("bnxt_re0"))) == (mlx5, bnxt), name


def test_nic_exporter_builds_with_both_sources():
    from exporters.nic import build
    from exporters.runtime import Options

    exporter = build(Options(roots=IB_ROOTS))
    assert (
        exporter.registry.get_sample_value(
            "mac_exporter_collector_success", {"collector": "infiniband"}
        )
        == 1
    )


def test_no_rdma_device_is_reported_not_fatal(tmp_path):
    registry = Exporter("nic-exporter", [RdmaSource(Roots(sys_root=str(tmp_path)))]).registry
    reason = f"no RDMA devices under {tmp_path}/class/infiniband"
    assert backend_available(registry, "rdma", reason) == 0


def test_real_ethtool_failure_names_the_interface():
    import shutil

    from exporters.nic import run_ethtool

    if shutil.which("ethtool") is None:
        pytest.skip("ethtool is not installed (scripts/bootstrap installs it)")
    with pytest.raises(RuntimeError, match="ethtool -S mac-no-such-if0"):
        run_ethtool("mac-no-such-if0")


def fake_ethtool_on_path(tmp_path, monkeypatch, slow_iface: str) -> None:
    """A real `ethtool` on PATH that answers the recorded stats, blocking on ``slow_iface``
    the way `ethtool -S` does while a firmware reset or link flap holds the RTNL lock."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ethtool"
    script.write_text(
        "#!/bin/sh\n"
        f'[ "$2" = {slow_iface} ] && exec sleep 60\n'
        f'f="{FIXTURES}/ethtool/$2.txt"\n'
        '[ -f "$f" ] || { echo "Operation not supported" >&2; exit 95; }\n'
        'exec cat "$f"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def one_scrape(registry) -> dict[tuple[str, tuple], float]:
    """Every sample of one scrape, by (name, sorted labels): a slow scrape is paid once."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
    }


def sample(samples: dict, name: str, labels: dict) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_one_slow_ethtool_costs_only_its_own_device(tmp_path, monkeypatch, caplog):
    fake_ethtool_on_path(tmp_path, monkeypatch, slow_iface="ens1f0np0")
    exporter = Exporter("nic-exporter", [RdmaSource(IB_ROOTS)])  # the real ethtool runner
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="exporters"):
        samples = one_scrape(exporter.registry)
    elapsed = time.monotonic() - started
    exporter.close()
    assert elapsed < 4, f"one blocked ethtool held the scrape for {elapsed:.1f}s"
    assert sample(samples, "mac_exporter_collector_success", {"collector": "rdma"}) == 1
    rx = "rdma_rx_bytes_total"
    # The other devices, through ethtool (GPUBoost) or sysfs (Thor2, irdma), are all there.
    assert sample(samples, rx, labels("", "mangoboost", "enp65s0")) == (
        1048576000000 + 1048575990272
    )
    assert sample(samples, rx, labels("bnxt_re0", "broadcom", "ens2f0np0")) == 37384362467952
    assert sample(samples, rx, labels("irdma0", "intel", "ens3f0")) == 2500000000 * 4
    # The slow one says so: device not ok, no bytes this scrape, its link state still there.
    slow_ok = ok_labels("mlx5_0", "mellanox", "ens1f0np0")
    assert sample(samples, "mac_nic_device_ok", slow_ok) == 0
    assert sample(samples, rx, labels("mlx5_0", "mellanox", "ens1f0np0")) is None
    assert sample(samples, "rdma_link_up", labels("mlx5_0", "mellanox", "ens1f0np0")) == 1
    assert sample(samples, "mac_nic_device_ok", ok_labels("", "mangoboost", "enp65s0")) == 1
    slow = [r.getMessage() for r in caplog.records if "ens1f0np0" in r.getMessage()]
    assert any("did not answer within" in message for message in slow), slow


def test_a_hung_ethtool_runner_is_not_waited_for(monkeypatch):
    release = threading.Event()

    def hung_on_mlx5_0(iface: str) -> str:
        if iface == "ens1f0np0":
            release.wait(30)
        return fixture_ethtool(iface)

    source = RdmaSource(IB_ROOTS, ethtool=hung_on_mlx5_0, ethtool_timeout=0.3)
    exporter = Exporter("nic-exporter", [source])
    try:
        samples = one_scrape(exporter.registry)
        assert sample(samples, "mac_exporter_collector_success", {"collector": "rdma"}) == 1
        ok = ok_labels("mlx5_0", "mellanox", "ens1f0np0")
        assert sample(samples, "mac_nic_device_ok", ok) == 0
        assert sample(samples, "mac_nic_device_ok", ok_labels("", "mangoboost", "enp65s0")) == 1
    finally:
        release.set()
        exporter.close()
