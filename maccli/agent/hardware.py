"""What this node has, as the registration reports it: GPUs, NICs and its machine id.

Nothing is discovered here: GPUs and NICs come from the node's hardware discovery
(node.hardware), the same that `mac doctor` and the exporters use, so the master's
inventory, mango-sdk-agent and the exporters all see one node. The trees are the
node's roots (NodeConfig.roots: the MAC_*_ROOT settings), so tests point them at a
prepared directory.
"""

from __future__ import annotations

from node.config import NodeConfig
from node.hardware import NetInterface, detect_gpus, discover_interfaces


def gpus(cfg: NodeConfig) -> tuple[str, int]:
    """("nvidia"|"amd"|"none", count)."""
    return detect_gpus(cfg.roots())


def registration_nic(nic: NetInterface) -> dict:
    """One NIC in the shape the master stores (name, mac, and driver, ibdev, speed if known)."""
    entry: dict = {"name": nic.name, "mac": nic.mac_address}
    if nic.driver:
        entry["driver"] = nic.driver
    if nic.ibdev:
        entry["ibdev"] = nic.ibdev
    if nic.speed_mbps:
        entry["speed_mbps"] = nic.speed_mbps
    return entry


def nics(cfg: NodeConfig) -> list[dict]:
    """The physical network interfaces (those backed by a device), for the registration."""
    return [registration_nic(nic) for nic in discover_interfaces(cfg.roots()) if nic.physical]


def machine_id(cfg: NodeConfig) -> str:
    """/etc/machine-id (under MAC_ETC_ROOT), or "" where the node has none."""
    try:
        text = cfg.roots().host("/etc/machine-id").read_text()
    except OSError:
        return ""
    return text.strip()[:64]
