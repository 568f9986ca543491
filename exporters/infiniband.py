"""nic-exporter's port counters under node_exporter's ``node_infiniband_*`` names.

The same sysfs files node_exporter's infiniband collector reads, under the same
names and labels (``device`` = the verbs device, ``port``), so alert rules and
dashboards written for node_exporter work unchanged:

* ``ports/<n>/counters/*``: the IBTA port counters every verbs driver keeps
  (symbol and receive errors, link downed and recovered, discards, transmit wait,
  packets; ``port_{rcv,xmit}_data`` count 4-byte words and are reported in bytes);
* ``ports/<n>/counters_ext/*``: the 64-bit counters of kernels before 4.5 (mlx4),
  as node_exporter's ``node_infiniband_legacy_*``;
* ``ports/<n>/hw_counters/*``: the RoCE congestion and retransmission counters.
  mlx5 names them as node_exporter expects (``np_cnp_sent``, ``rp_cnp_handled``,
  ``out_of_sequence``, ``packet_seq_err``, ``local_ack_timeout_err``...). bnxt_re
  (Broadcom Thor2) keeps the same events under its own names (``tx_cnp_pkts``,
  ``rx_cnp_pkts``, ``seq_err_naks_rcvd``, ``to_retransmits``...); they land in the
  same families so one query reads both vendors. Recent bnxt_re releases rename
  several to the mlx5 names, which are read first.

node_exporter on 29101 runs with its infiniband collector off, so each series has
one source, served on the host network where it survives ``ip_forward=0``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from node.host import Roots, list_dir, read_int, read_value

LABELS = ["device", "port"]

# counters/<file> -> (family without node_infiniband_ and _total, unit multiplier, help)
PORT_COUNTERS: dict[str, tuple[str, int, str]] = {
    "excessive_buffer_overrun_errors": (
        "excessive_buffer_overrun_errors",
        1,
        "Number of times that OverrunErrors consecutive flow control update periods "
        "occurred, each having at least one overrun error.",
    ),
    "link_downed": (
        "link_downed",
        1,
        "Number of times the link failed to recover from an error state and went down",
    ),
    "link_error_recovery": (
        "link_error_recovery",
        1,
        "Number of times the link successfully recovered from an error state",
    ),
    "local_link_integrity_errors": (
        "local_link_integrity_errors",
        1,
        "Number of times that the count of local physical errors exceeded the threshold "
        "specified by LocalPhyErrors.",
    ),
    "multicast_rcv_packets": (
        "multicast_packets_received",
        1,
        "Number of multicast packets received (including errors)",
    ),
    "multicast_xmit_packets": (
        "multicast_packets_transmitted",
        1,
        "Number of multicast packets transmitted (including errors)",
    ),
    "port_rcv_constraint_errors": (
        "port_constraint_errors_received",
        1,
        "Number of packets received on the switch physical port that are discarded",
    ),
    "port_xmit_constraint_errors": (
        "port_constraint_errors_transmitted",
        1,
        "Number of packets not transmitted from the switch physical port",
    ),
    "port_rcv_data": ("port_data_received_bytes", 4, "Number of data octets received on all links"),
    "port_xmit_data": (
        "port_data_transmitted_bytes",
        4,
        "Number of data octets transmitted on all links",
    ),
    "port_rcv_discards": (
        "port_discards_received",
        1,
        "Number of inbound packets discarded by the port because the port is down or congested",
    ),
    "port_xmit_discards": (
        "port_discards_transmitted",
        1,
        "Number of outbound packets discarded by the port because the port is down or congested",
    ),
    "port_rcv_errors": (
        "port_errors_received",
        1,
        "Number of packets containing an error that were received on this port",
    ),
    "port_rcv_packets": (
        "port_packets_received",
        1,
        "Number of packets received on all VLs by this port (including errors)",
    ),
    "port_xmit_packets": (
        "port_packets_transmitted",
        1,
        "Number of packets transmitted on all VLs from this port (including errors)",
    ),
    "port_xmit_wait": (
        "port_transmit_wait",
        1,
        "Number of ticks during which the port had data to transmit but no data was sent "
        "during the entire tick",
    ),
    "port_rcv_remote_physical_errors": (
        "port_receive_remote_physical_errors",
        1,
        "Number of packets marked with the EBP (End of Bad Packet) delimiter received on the port.",
    ),
    "port_rcv_switch_relay_errors": (
        "port_receive_switch_relay_errors",
        1,
        "Number of packets that could not be forwarded by the switch.",
    ),
    "symbol_error": (
        "symbol_error",
        1,
        "Number of minor link errors detected on one or more physical lanes.",
    ),
    "unicast_rcv_packets": (
        "unicast_packets_received",
        1,
        "Number of unicast packets received (including errors)",
    ),
    "unicast_xmit_packets": (
        "unicast_packets_transmitted",
        1,
        "Number of unicast packets transmitted (including errors)",
    ),
    "VL15_dropped": (
        "vl15_dropped",
        1,
        "Number of incoming VL15 packets dropped due to resource limitations.",
    ),
}

# counters_ext/<file> -> (family, unit multiplier, help): the 64-bit counters that
# kernels before 4.5 kept beside the 32-bit ones (mlx4), as node_exporter's
# ``legacy_*`` families; the data counters count 4-byte words there too.
LEGACY_COUNTERS: dict[str, tuple[str, int, str]] = {
    "port_multicast_rcv_packets": (
        "legacy_multicast_packets_received",
        1,
        "Number of multicast packets received",
    ),
    "port_multicast_xmit_packets": (
        "legacy_multicast_packets_transmitted",
        1,
        "Number of multicast packets transmitted",
    ),
    "port_rcv_data_64": (
        "legacy_data_received_bytes",
        4,
        "Number of data octets received on all links",
    ),
    "port_rcv_packets_64": (
        "legacy_packets_received",
        1,
        "Number of data packets received on all links",
    ),
    "port_unicast_rcv_packets": (
        "legacy_unicast_packets_received",
        1,
        "Number of unicast packets received",
    ),
    "port_unicast_xmit_packets": (
        "legacy_unicast_packets_transmitted",
        1,
        "Number of unicast packets transmitted",
    ),
    "port_xmit_data_64": (
        "legacy_data_transmitted_bytes",
        4,
        "Number of data octets transmitted on all links",
    ),
    # node_exporter's help says "received" here as well; kept so the HELP lines match.
    "port_xmit_packets_64": (
        "legacy_packets_transmitted",
        1,
        "Number of data packets received on all links",
    ),
}

# family -> (hw_counters files, first found wins: mlx5's name, then bnxt_re's), help
HW_COUNTERS: dict[str, tuple[tuple[str, ...], str]] = {
    "np_cnp_packets_sent": (
        ("np_cnp_sent", "np_cnp_pkts", "tx_cnp_pkts"),
        "CNP packets sent by the notification point on congestion (ECN-marked RoCEv2 received)",
    ),
    "rp_cnp_packets_handled": (
        ("rp_cnp_handled", "rx_cnp_pkts"),
        "CNP packets handled by the reaction point to throttle the transmission rate",
    ),
    "np_ecn_marked_roce_packets_received": (
        ("np_ecn_marked_roce_packets", "rx_ecn_marked_pkts"),
        "RoCEv2 packets received marked for experiencing congestion (ECN bits 11)",
    ),
    "out_of_sequence_packets_received": (
        ("out_of_sequence", "oos_drop_count", "res_oos_drop_count"),
        "Out-of-sequence packets received",
    ),
    "packet_sequence_errors": (
        ("packet_seq_err", "seq_err_naks_rcvd"),
        "NAK sequence error packets received; the QP retry limit was not exceeded",
    ),
    "local_ack_timeout_errors": (
        ("local_ack_timeout_err", "to_retransmits"),
        "Times the sender's QP ACK timer expired (retransmission on timeout)",
    ),
    "implied_nak_seq_errors": (
        ("implied_nak_seq_err",),
        "Times the requester decided an ACK with a PSN larger than expected",
    ),
    "duplicate_requests_packets": (
        ("duplicate_request", "dup_req"),
        "Received duplicate request packets (already executed)",
    ),
    "rnr_nak_retry_packets_received": (
        ("rnr_nak_retry_err", "rnr_naks_rcvd"),
        "RNR NAK packets received; the QP retry limit was not exceeded",
    ),
    "out_of_buffer_drops": (
        ("out_of_buffer", "rx_out_of_buffer"),
        "Drops for lack of a WQE on the associated QPs",
    ),
    "roce_adp_retransmits": (("roce_adp_retrans",), "Adaptive retransmissions for RoCE traffic"),
    "roce_adp_retransmits_timeout": (
        ("roce_adp_retrans_to",),
        "Times RoCE traffic reached timeout due to adaptive retransmission",
    ),
    "rx_write_requests": (("rx_write_requests",), "Received WRITE requests"),
    "rx_read_requests": (("rx_read_requests",), "Received READ requests"),
    "rx_atomic_requests": (("rx_atomic_requests",), "Received ATOMIC requests"),
    "rx_icrc_encapsulated_errors": (
        ("rx_icrc_encapsulated",),
        "RoCE packets with ICRC errors",
    ),
    "req_cqes_errors": (("req_cqe_error",), "Requester CQEs completed with errors"),
    "resp_cqes_errors": (("resp_cqe_error",), "Responder CQEs completed with errors"),
}


def _state_id(text: str | None) -> int | None:
    """``4: ACTIVE`` / ``5: LinkUp`` -> the number before the colon."""
    head = (text or "").split(":", 1)[0].strip()
    return int(head) if head.isdigit() else None


def _rate(text: str | None) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> bytes per second (as node_exporter reports it)."""
    words = (text or "").split()
    try:
        return float(words[0]) * 1e9 / 8 if len(words) >= 2 and words[1] == "Gb/sec" else None
    except ValueError:
        return None


class InfinibandSource:
    """node_infiniband_* per verbs device and port, from sysfs."""

    name = "infiniband"

    def __init__(self, roots: Roots):
        self.roots = roots

    def collect(self) -> Iterable[Metric]:
        root = self.roots.sys("class", "infiniband")
        info = GaugeMetricFamily(
            "node_infiniband_info",
            "Non-numeric data from /sys/class/infiniband/<device>, value is always 1.",
            labels=["device", "board_id", "firmware_version", "hca_type"],
        )
        gauges = {
            "state_id": GaugeMetricFamily(
                "node_infiniband_state_id", "State of the InfiniBand port (0: no change, "
                "1: down, 2: init, 3: armed, 4: active, 5: act defer)", labels=LABELS,
            ),
            "physical_state_id": GaugeMetricFamily(
                "node_infiniband_physical_state_id", "Physical state of the InfiniBand port "
                "(0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, 5: link up, "
                "6: link error recover, 7: phytest)", labels=LABELS,
            ),
            "rate_bytes_per_second": GaugeMetricFamily(
                "node_infiniband_rate_bytes_per_second",
                "Maximum signal transfer rate", labels=LABELS,
            ),
        }  # fmt: skip
        counters: dict[str, CounterMetricFamily] = {}

        def counter(family: str, doc: str) -> CounterMetricFamily:
            if family not in counters:
                counters[family] = CounterMetricFamily(
                    f"node_infiniband_{family}", doc, labels=LABELS
                )
            return counters[family]

        for device in list_dir(root):
            base = root / device
            info.add_metric(
                [
                    device,
                    read_value(base / "board_id") or "",
                    read_value(base / "fw_ver") or "",
                    read_value(base / "hca_type") or "",
                ],
                1.0,
            )
            for port in list_dir(base / "ports"):
                self._port(base / "ports" / port, [device, port], gauges, counter)
        yield info
        yield from gauges.values()
        yield from counters.values()

    @staticmethod
    def _port(port_dir: Path, labels: list[str], gauges: dict, counter) -> None:
        for key, value in (
            ("state_id", _state_id(read_value(port_dir / "state"))),
            ("physical_state_id", _state_id(read_value(port_dir / "phys_state"))),
            ("rate_bytes_per_second", _rate(read_value(port_dir / "rate"))),
        ):
            if value is not None:
                gauges[key].add_metric(labels, value)
        for folder, table in (("counters_ext", LEGACY_COUNTERS), ("counters", PORT_COUNTERS)):
            for filename, (family, unit, doc) in table.items():
                value = read_int(port_dir / folder / filename)
                if value is not None:
                    counter(family, doc).add_metric(labels, value * unit)
        hw = port_dir / "hw_counters"
        for family, (files, doc) in HW_COUNTERS.items():
            for filename in files:
                value = read_int(hw / filename)
                if value is not None:
                    counter(family, doc).add_metric(labels, value)
                    break
