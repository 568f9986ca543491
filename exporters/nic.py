"""nic-exporter: RDMA bandwidth of every RDMA NIC, whatever its vendor, as one family.

Where the bytes come from depends on the NIC:

* NVIDIA Mellanox (mlx5) and MangoBoost GPUBoost: ``ethtool -S <iface>`` RDMA
  counters (mlx5: ``{rx,tx}_vport_rdma_{unicast,multicast}_bytes``);
* Broadcom Thor2 (BCM57608, bnxt_re): ``/sys/class/infiniband/<ibdev>/ports/1/
  hw_counters/{rx,tx}_bytes``;
* anything else with an IB device: the standard port counters
  ``port_{rcv,xmit}_data``, which count 4-byte words, not bytes.

All of it lands in ``rdma_{rx,tx}_bytes_total{device,port,vendor,iface}``, with the
link state and rate beside it. Each device is read on its own: one odd device
never hides the others. The error and congestion counters of the same ports are
``node_infiniband_*`` (exporters.infiniband).

``device`` is always the verbs device as /sys/class/infiniband and node_exporter
name it (mlx5_0, bnxt_re0), ``iface`` the interface; a NIC without a verbs device
(GPUBoost through ethtool alone) has no ``device`` label.

The discovery here (RDMA devices, network interfaces, a port's sysfs counters) is
the node's only walk of /sys/class/infiniband and /sys/class/net for devices:
mango-sdk-agent's inventory, `mac doctor`'s RDMA check and the registration's
``nics`` read them through these functions.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporters.runtime import (
    BackendStatus,
    Exporter,
    Options,
    Roots,
    list_dir,
    read_int,
    read_value,
)

log = logging.getLogger("exporters")

# PCI vendor ids and kernel drivers that tell the NIC family apart.
PCI_VENDORS = {"0x15b3": "mellanox", "0x14e4": "broadcom", "0x8086": "intel"}
DRIVERS = {
    "mlx5_core": "mellanox",
    "mlx4_core": "mellanox",
    "bnxt_en": "broadcom",
    "bnxt_re": "broadcom",
}
# MangoBoost GPUBoost drivers are recognised by name (their PCI id varies by product).
MANGOBOOST_DRIVER = re.compile(r"mango|gpuboost|^mb_", re.I)

MLX5_RDMA = {
    "rx": ("rx_vport_rdma_unicast_bytes", "rx_vport_rdma_multicast_bytes"),
    "tx": ("tx_vport_rdma_unicast_bytes", "tx_vport_rdma_multicast_bytes"),
}
# GPUBoost names its RDMA byte counters <dir>_rdma_..._bytes / rdma_<dir>_bytes.
MANGOBOOST_RDMA = {
    "rx": re.compile(r"^(rx_(\w+_)?rdma(_\w+)?_bytes|rdma_rx_bytes)$"),
    "tx": re.compile(r"^(tx_(\w+_)?rdma(_\w+)?_bytes|rdma_tx_bytes)$"),
}
IB_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")
IB_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")

EthtoolRunner = Callable[[str], str]


def run_ethtool(iface: str) -> str:
    """``ethtool -S <iface>``; raises RuntimeError with ethtool's own message on failure."""
    proc = subprocess.run(
        ["ethtool", "-S", iface], capture_output=True, text=True, timeout=5, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"ethtool -S {iface}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """Parse ``ethtool -S`` output into name -> value (per-queue lines keep their [n]: prefix)."""
    stats: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.rpartition(":")
        if not sep or not key.strip() or key.strip() == "NIC statistics":
            continue
        try:
            stats[key.strip()] = int(value.strip())
        except ValueError:
            continue
    return stats


def rdma_bytes_from_ethtool(vendor: str, stats: dict[str, int]) -> dict[str, int] | None:
    """RDMA rx/tx bytes for a Mellanox or MangoBoost NIC's ethtool stats; None if absent."""
    result = {}
    for direction in ("rx", "tx"):
        if vendor == "mellanox":
            keys = [key for key in MLX5_RDMA[direction] if key in stats]
        else:
            keys = [key for key in stats if MANGOBOOST_RDMA[direction].match(key)]
        if not keys:
            return None
        result[direction] = sum(stats[key] for key in keys)
    return result


def parse_ib_state(text: str) -> tuple[int, str] | None:
    """``4: ACTIVE`` -> (4, "ACTIVE")."""
    match = IB_STATE.match(text)
    return (int(match.group(1)), match.group(2)) if match else None


def parse_ib_rate(text: str) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> bytes per second."""
    match = IB_RATE.match(text)
    return float(match.group(1)) * 1e9 / 8 if match else None


@dataclass
class RdmaPort:
    port: str
    state: str = ""
    state_id: int | None = None
    rate_bytes_per_second: float | None = None
    link_layer: str = ""


@dataclass
class RdmaDevice:
    """One RDMA-capable NIC as sysfs describes it."""

    device: str  # the verbs device (mlx5_0, bnxt_re0); "" for an ethtool-only NIC
    iface: str
    vendor: str
    driver: str
    pci_address: str = ""
    pci_id: str = ""
    firmware: str = ""
    node_guid: str = ""
    ports: list[RdmaPort] = field(default_factory=list)
    # Every interface of the device's PCI function (``iface`` is the first); empty for
    # a NIC found through its driver alone.
    netdevs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class NetInterface:
    """One network interface under /sys/class/net, for the inventory and the registration."""

    name: str
    mac_address: str = ""
    operstate: str = ""
    mtu: int | None = None
    speed_mbps: int | None = None  # None when the link reports no speed
    driver: str = ""
    physical: bool = False  # backed by a device (not loopback, a bridge or a veth)
    ibdev: str = ""  # the RDMA device on the same PCI function, if any


@dataclass(frozen=True)
class PortCounters:
    """A port's RDMA byte counters as sysfs keeps them, already converted to bytes."""

    rx_file: str  # relative to the port directory, e.g. hw_counters/rx_bytes
    tx_file: str
    rx_bytes: int
    tx_bytes: int


def _link_name(path: Path) -> str:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return ""


def _vendor(driver: str, pci_vendor: str | None) -> str:
    if MANGOBOOST_DRIVER.search(driver):
        return "mangoboost"
    return DRIVERS.get(driver) or PCI_VENDORS.get(pci_vendor or "", "unknown")


def discover_rdma_devices(roots: Roots) -> list[RdmaDevice]:
    """Every IB device under /sys/class/infiniband, plus ethtool-only MangoBoost NICs."""
    devices = []
    claimed_ifaces: set[str] = set()
    ib_root = roots.sys("class", "infiniband")
    for name in list_dir(ib_root):
        base = ib_root / name
        pci = base / "device"
        driver = _link_name(pci / "driver")
        ifaces = list_dir(pci / "net")
        ports = []
        for port in list_dir(base / "ports"):
            state = parse_ib_state(read_value(base / "ports" / port / "state") or "")
            ports.append(
                RdmaPort(
                    port=port,
                    state=state[1] if state else "",
                    state_id=state[0] if state else None,
                    rate_bytes_per_second=parse_ib_rate(
                        read_value(base / "ports" / port / "rate") or ""
                    ),
                    link_layer=read_value(base / "ports" / port / "link_layer") or "",
                )
            )
        vendor_id = read_value(pci / "vendor")
        devices.append(
            RdmaDevice(
                device=name,
                iface=ifaces[0] if ifaces else "",
                vendor=_vendor(driver, vendor_id),
                driver=driver,
                pci_address=_link_name(pci),
                pci_id=f"{vendor_id or '?'}:{read_value(pci / 'device') or '?'}",
                firmware=read_value(base / "fw_ver") or "",
                node_guid=read_value(base / "node_guid") or "",
                ports=ports,
                netdevs=ifaces,
            )
        )
        claimed_ifaces.update(ifaces)
    net_root = roots.sys("class", "net")
    for iface in list_dir(net_root):
        if iface in claimed_ifaces:
            continue
        driver = _link_name(net_root / iface / "device" / "driver")
        if driver and MANGOBOOST_DRIVER.search(driver):
            devices.append(
                RdmaDevice(
                    device="",
                    iface=iface,
                    vendor="mangoboost",
                    driver=driver,
                    pci_address=_link_name(net_root / iface / "device"),
                    ports=[RdmaPort(port="1")],
                )
            )
    return devices


# Where sysfs keeps a port's byte counters, best first, and the bytes each unit holds:
# Thor2's hw_counters count bytes, the standard IB counters 4-byte words (IBTA
# PortCounters). Kernels before 4.5 keep the 64-bit word counters apart, in
# counters_ext, and their counters/port_*_data are 32-bit and stop at 4294967295
# (16 GiB) for good; node_exporter's capture of such an mlx4 port has both.
SYSFS_COUNTERS = (
    ("hw_counters/rx_bytes", "hw_counters/tx_bytes", 1),
    ("counters_ext/port_rcv_data_64", "counters_ext/port_xmit_data_64", 4),
    ("counters/port_rcv_data", "counters/port_xmit_data", 4),
)


def read_port_counters(roots: Roots, device: str, port: str) -> PortCounters | None:
    """The port's sysfs RDMA byte counters; None when it has none."""
    port_dir = roots.sys("class", "infiniband", device, "ports", port)
    for rx_file, tx_file, unit in SYSFS_COUNTERS:
        rx, tx = read_int(port_dir / rx_file), read_int(port_dir / tx_file)
        if rx is not None and tx is not None:
            return PortCounters(rx_file, tx_file, rx * unit, tx * unit)
    return None


def discover_interfaces(roots: Roots) -> list[NetInterface]:
    """Every interface under <sys>/class/net (loopback and virtual ones too), by name."""
    ibdev_of: dict[str, str] = {}
    for dev in discover_rdma_devices(roots):
        for netdev in dev.netdevs:
            ibdev_of.setdefault(netdev, dev.device)  # devices come sorted: the first wins
    base = roots.sys("class", "net")
    interfaces = []
    for name in list_dir(base):
        path = base / name
        speed = read_int(path / "speed")
        interfaces.append(
            NetInterface(
                name=name,
                mac_address=read_value(path / "address") or "",
                operstate=read_value(path / "operstate") or "",
                mtu=read_int(path / "mtu"),
                speed_mbps=speed if speed is not None and speed >= 0 else None,
                driver=_link_name(path / "device" / "driver"),
                physical=name != "lo" and (path / "device").exists(),
                ibdev=ibdev_of.get(name, ""),
            )
        )
    return interfaces


class RdmaSource:
    """rdma_{rx,tx}_bytes_total plus link state and rate, per device and port."""

    name = "rdma"

    def __init__(self, roots: Roots, ethtool: EthtoolRunner | None = None):
        self.roots = roots
        self.ethtool = ethtool or run_ethtool
        self._default_ethtool = ethtool is None
        self._backends: list[BackendStatus] = []

    def backends(self) -> list[BackendStatus]:
        return self._backends

    def _port_bytes(self, dev: RdmaDevice, port: RdmaPort) -> tuple[int, int]:
        """(rx, tx) bytes for one port, from the source that fits the vendor."""
        if dev.vendor in ("mellanox", "mangoboost") and dev.iface:
            try:
                stats = parse_ethtool_stats(self.ethtool(dev.iface))
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                # The sysfs counters below still tell the bandwidth; say why ethtool did not.
                log.warning("nic %s: %s; falling back to sysfs counters", dev.iface, exc)
            else:
                found = rdma_bytes_from_ethtool(dev.vendor, stats)
                if found is not None:
                    return found["rx"], found["tx"]
        counters = read_port_counters(self.roots, dev.device, port.port) if dev.device else None
        if counters is not None:
            return counters.rx_bytes, counters.tx_bytes
        raise LookupError(
            f"{dev.device or dev.iface} port {port.port}: no RDMA byte counters found"
        )

    def collect(self) -> Iterable[Metric]:
        labels = ["device", "port", "vendor", "iface"]
        rx = CounterMetricFamily("rdma_rx_bytes_total", "RDMA bytes received.", labels=labels)
        tx = CounterMetricFamily("rdma_tx_bytes_total", "RDMA bytes transmitted.", labels=labels)
        up = GaugeMetricFamily(
            "rdma_link_up", "1 when the RDMA port is ACTIVE (or has carrier).", labels=labels
        )
        state_id = GaugeMetricFamily(
            "rdma_link_state_id",
            "IB port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
            labels=labels,
        )
        rate = GaugeMetricFamily(
            "rdma_link_rate_bytes_per_second", "Negotiated port rate.", labels=labels
        )
        ok = GaugeMetricFamily(
            "mac_nic_device_ok",
            "1 when the device's counters were read this scrape, 0 when its source failed.",
            labels=["device", "vendor", "iface"],
        )
        devices = discover_rdma_devices(self.roots)
        for dev in devices:
            device_ok = True
            for port in dev.ports:
                values = [dev.device, port.port, dev.vendor, dev.iface]
                if port.state_id is not None:
                    state_id.add_metric(values, port.state_id)
                    up.add_metric(values, 1.0 if port.state == "ACTIVE" else 0.0)
                elif dev.iface:
                    carrier = read_int(self.roots.sys("class", "net", dev.iface, "carrier"))
                    if carrier is not None:
                        up.add_metric(values, float(carrier))
                if port.rate_bytes_per_second is not None:
                    rate.add_metric(values, port.rate_bytes_per_second)
                try:
                    rx_bytes, tx_bytes = self._port_bytes(dev, port)
                except (OSError, RuntimeError, LookupError, subprocess.SubprocessError) as exc:
                    device_ok = False
                    log.warning("nic %s port %s: %s", dev.device or dev.iface, port.port, exc)
                    continue
                rx.add_metric(values, rx_bytes)
                tx.add_metric(values, tx_bytes)
            ok.add_metric([dev.device, dev.vendor, dev.iface], 1.0 if device_ok else 0.0)
        self._backends = self._backend_status(devices)
        yield from (rx, tx, up, state_id, rate, ok)

    def _backend_status(self, devices: list[RdmaDevice]) -> list[BackendStatus]:
        statuses = [
            BackendStatus(
                "rdma",
                bool(devices),
                "" if devices else f"no RDMA devices under {self.roots.sys('class', 'infiniband')}",
            )
        ]
        if any(dev.vendor in ("mellanox", "mangoboost") for dev in devices):
            found = not self._default_ethtool or shutil.which("ethtool") is not None
            statuses.append(
                BackendStatus("ethtool", found, "" if found else "ethtool not found in PATH")
            )
        return statuses


def build(options: Options) -> Exporter:
    # Imported here: exporters.infiniband reads the same sysfs tree through this module.
    from exporters.infiniband import InfinibandSource

    return Exporter(
        "nic-exporter",
        [RdmaSource(options.roots), InfinibandSource(options.roots)],
        timeout=options.timeout,
    )
