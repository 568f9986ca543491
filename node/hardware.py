"""What hardware this node has: network interfaces, RDMA NICs and GPUs, from sysfs.

The node's only walk of /sys/class/net, /sys/class/infiniband and /sys/class/drm:
nic-exporter and rocm-exporter read their metrics under the devices found here,
mango-sdk-agent lists them, `mac doctor`'s checks count them and the registration
reports them, so every part of MAC sees one node. Detection reads sysfs and procfs
only (no driver library), so it also works where a driver is broken.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from node.host import Roots, list_dir, read_int, read_value

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

IB_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")
IB_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")


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


AMD_PCI_VENDOR = "0x1002"
CARD = re.compile(r"^card(\d+)$")


def amd_cards(roots: Roots) -> list[tuple[str, Path]]:
    """(card, its PCI device directory) of every AMD card under <sys>/class/drm, in card order.

    The one walk of the DRM cards: the exporter reads its metrics under these
    devices, and `mac doctor` and the registration count the GPUs from them.
    """
    drm = roots.sys("class", "drm")
    cards = sorted((int(m.group(1)), name) for name in list_dir(drm) if (m := CARD.match(name)))
    found = []
    for _, card in cards:
        device = drm / card / "device"
        if (read_value(device / "vendor") or "").lower() == AMD_PCI_VENDOR:
            found.append((card, device))
    return found


NVIDIA_PCI_VENDOR = "0x10de"


GPU_PCI_CLASSES = ("0x03", "0x12")  # display controller, processing accelerator


def _pci_display_devices(roots: Roots, vendor: str) -> set[str]:
    """PCI addresses of one vendor's GPUs: display controllers (class 0x03xxxx), and
    processing accelerators (0x12xxxx), which AMD's Instinct MI300 parts report."""
    found = set()
    base = roots.sys("bus/pci/devices")
    for device in base.glob("*") if base.is_dir() else []:
        try:
            if (device / "vendor").read_text().strip().lower() != vendor:
                continue
            if not (device / "class").read_text().strip().lower().startswith(GPU_PCI_CLASSES):
                continue
        except OSError:
            continue
        found.add(device.name)
    return found


def amd_gpu_count(roots: Roots) -> int:
    """The DRM cards rocm-exporter reads, plus AMD display devices the driver never bound."""
    cards = {device.resolve().name for _, device in amd_cards(roots)}
    return len(cards | _pci_display_devices(roots, AMD_PCI_VENDOR))


def nvidia_gpu_count(roots: Roots) -> int:
    gpus_dir = roots.proc("driver/nvidia/gpus")
    from_driver = len(list(gpus_dir.iterdir())) if gpus_dir.is_dir() else 0
    nodes = [p for p in roots.dev().glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)]
    from_pci = len(_pci_display_devices(roots, NVIDIA_PCI_VENDOR))
    return max(from_driver, len(nodes), from_pci)


def detect_gpus(roots: Roots) -> tuple[str, int]:
    """("nvidia"|"amd"|"none", count) as the registration API wants them."""
    nvidia = nvidia_gpu_count(roots)
    if nvidia:
        return "nvidia", nvidia
    amd = amd_gpu_count(roots)
    if amd:
        return "amd", amd
    return "none", 0
