"""nic-exporter's ethtool parsing on a Broadcom bnxt_en `ethtool -S` captured on real hardware.

The capture is Showmax's prometheus-ethtool-exporter test data (a BCM57xxx 10G port on
RHEL 8, 8 queues), read from the captures folder: tests/fixtures/captured/MANIFEST.md
names the repository, commit, licence and sha256; without the file the tests skip.
The values in the tests were read by hand from ``_S_bnxten418_sfp_10gwtf1``.
"""

from __future__ import annotations

from exporters.nic import parse_ethtool_stats, rdma_bytes_from_ethtool
from node.hardware import DRIVERS
from tests.exporters.captures import capture

CAPTURE = "Showmax/prometheus-ethtool-exporter/tests/fixtures"


def stats() -> dict[str, int]:
    return parse_ethtool_stats(capture(f"{CAPTURE}/_S_bnxten418_sfp_10gwtf1").read_text())


def test_every_counter_line_of_the_capture_is_parsed():
    # 396 lines: the "NIC statistics:" header and 395 "name: value" lines, no name twice.
    assert len(stats()) == 395


def test_per_queue_counters_keep_their_queue_and_port_totals_stand_alone():
    found = stats()
    assert found["[3]: rx_ucast_bytes"] == 1622572834
    assert found["[0]: tx_ucast_bytes"] == 39968103964
    assert found["rx_bytes"] == 215351646640
    assert found["tx_bytes"] == 270725761359
    assert found["link_down_events"] == 4
    # The eight queues' unicast bytes, added up by hand from the capture:
    # 1539479713 + 1965196636 + 24211591466 + 1622572834
    # + 1444234528 + 1665759747 + 1571391700 + 1648208215 = 35668434839
    queues = [found[f"[{queue}]: rx_ucast_bytes"] for queue in range(8)]
    assert sum(queues) == 35668434839
    assert "[8]: rx_ucast_bytes" not in found


def test_bnxt_en_has_no_rdma_byte_counters_in_ethtool():
    """Why Thor2's RDMA bytes come from hw_counters: its ethtool has none to read."""
    found = stats()
    assert rdma_bytes_from_ethtool("mellanox", found) is None
    assert rdma_bytes_from_ethtool("mangoboost", found) is None
    assert not [name for name in found if "rdma" in name]
    # Only RoCE pause events mention RoCE at all.
    assert found["continuous_roce_pause_events"] == 0


def test_the_captured_driver_is_a_broadcom_one():
    info = dict(
        line.split(": ", 1)
        for line in capture(f"{CAPTURE}/_i_bnxten418_sfp_10gwtf1").read_text().splitlines()
        if ": " in line
    )
    assert (info["driver"], info["bus-info"]) == ("bnxt_en", "0000:ca:00.1")
    assert DRIVERS[info["driver"]] == "broadcom"
