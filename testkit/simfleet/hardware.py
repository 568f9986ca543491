"""The hardware of each simulated profile, read once by MAC's real exporters over the fakes.

Nothing here writes an exposition by hand: dcgm-exporter runs ``NvmlSource`` over
``FakeNvml`` with eight H200s, rocm-exporter ``AmdGpuSource`` over ``FakeAmdSmi``
with eight MI300Xs, nic-exporter ``RdmaSource`` and ``InfinibandSource`` over a
sysfs tree cloned from the recorded mlx5, bnxt_re and GPUBoost devices of
tests/fixtures (with ``ethtool -S`` answered from the recorded outputs). Their
/metrics text, with the node's hostname replaced by ``HOST``, becomes a profile's
template (testkit.simfleet.template); only the values move afterwards. GPU UUIDs and
serials carry ``TOKEN``, which each node replaces with its own, so that no two simulated
GPUs share an identity (the master keeps a GPU's fault history by it).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, generate_latest

from exporters.runtime import Exporter
from node.host import Roots

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
HOST = "simfleet-template-host"  # stands for the node's hostname in every template
TOKEN = "5eedf00d"  # stands for the node's own 8 hex digits in GPU UUIDs and serials
NVIDIA_DRIVER = "550.90.07"
XIDS = (13, 31, 43, 48, 63, 79, 94)  # the XIDs a simulated GPU may report


@dataclass(frozen=True)
class NicKind:
    """A recorded RDMA NIC of tests/fixtures, cloned as many times as a profile has."""

    vendor: str  # nic-exporter's vendor label
    ibdev: str  # the recorded verbs device ("" for an ethtool-only NIC)
    iface: str  # the recorded interface
    pci_dir: str  # the recorded PCI function, under sysfs-ib/devices
    driver: str
    ibdev_prefix: str
    iface_format: str
    ethtool: str | None  # recorded `ethtool -S` output, or None where sysfs counts the bytes


MLX5 = NicKind(
    "mellanox", "mlx5_0", "ens1f0np0", "pci0000:16/0000:17:00.0", "mlx5_core",
    "mlx5_", "ens{n}f0np0", "ens1f0np0.txt",
)  # fmt: skip
BNXT_RE = NicKind(
    "broadcom", "bnxt_re0", "ens2f0np0", "pci0000:2a/0000:2b:00.0", "bnxt_en",
    "bnxt_re", "ens{n}f0np0", None,
)  # fmt: skip
GPUBOOST = NicKind(
    "mangoboost", "", "enp65s0", "pci0000:5a/0000:5b:00.0", "mango_gpuboost",
    "", "enp{n}s0", "enp65s0.txt",
)  # fmt: skip


def nic_names(kind: NicKind, count: int) -> list[tuple[str, str]]:
    """(verbs device, interface) of each cloned NIC."""
    return [
        (f"{kind.ibdev_prefix}{n}" if kind.ibdev else "", kind.iface_format.format(n=n + 1))
        for n in range(count)
    ]


def build_nic_tree(root: Path, kind: NicKind, count: int) -> dict[str, str]:
    """A sysfs tree under ``root`` with ``count`` clones of ``kind``.

    Returns each interface's ``ethtool -S`` text where ``kind`` counts its bytes there.
    """
    src = FIXTURES / "sysfs-ib"
    ethtool = {}
    for n, (ibdev, iface) in enumerate(nic_names(kind, count)):
        pci = root / "devices" / f"pci0000:{0x16 + n:02x}" / f"0000:{0x17 + n:02x}:00.0"
        pci.mkdir(parents=True)
        for name in ("vendor", "device"):
            shutil.copy(src / "devices" / kind.pci_dir / name, pci / name)
        os.symlink(f"../../../bus/pci/drivers/{kind.driver}", pci / "driver")
        pci_link = os.path.relpath(pci, root / "class" / "net" / "x")
        net = root / "class" / "net" / iface
        net.mkdir(parents=True)
        for name in ("operstate", "carrier", "speed"):
            recorded = src / "class" / "net" / kind.iface / name
            if recorded.exists():
                shutil.copy(recorded, net / name)
        if not (net / "speed").exists():
            (net / "speed").write_text("400000\n")  # a 400 Gb/s port, as ethtool says
        (net / "address").write_text(f"02:5e:00:00:{0x10 + n:02x}:01\n")  # locally administered
        if kind.ibdev:
            (pci / "net" / iface).mkdir(parents=True)
            shutil.copy(
                src / "devices" / kind.pci_dir / "net" / kind.iface / "address",
                pci / "net" / iface / "address",
            )
            dev = root / "class" / "infiniband" / ibdev
            shutil.copytree(src / "class" / "infiniband" / kind.ibdev, dev, symlinks=True)
            (dev / "device").unlink()
            os.symlink(pci_link, dev / "device")
        os.symlink(pci_link, net / "device")
        if kind.ethtool:
            ethtool[iface] = (FIXTURES / "ethtool" / kind.ethtool).read_text()
    return ethtool


def scrape(exporter: Exporter, times: int = 2) -> str:
    """The exporter's /metrics text after ``times`` scrapes (rates and GPM need a second)."""
    text = b""
    for _ in range(times):
        text = exporter.exposition(exporter.registry)
    exporter.close()
    return text.decode()


def h200s(count: int) -> list:
    """The fake H200s of the NVIDIA profile (identities carry TOKEN)."""
    from testkit.fakes.nvml import FakeGpu

    return [
        FakeGpu(
            uuid=f"GPU-5d2f7b1e-8c3a-4f6e-9b0d-{TOKEN}{index:04x}",
            bus_id=f"00000000:{0x19 + 0x10 * index:02X}:00.0",
            minor=index,
            serial=f"1652{TOKEN}{index:02d}",
        )
        for index in range(count)
    ]


@functools.cache
def nvidia_identities(count: int) -> tuple[tuple[str, ...], ...]:
    """dcgm-exporter's verdict labels of each GPU (exporters.nvidia.HEALTH_LABELS)."""
    return tuple(
        (str(i), gpu.uuid, gpu.bus_id, f"nvidia{i}", gpu.name, HOST, NVIDIA_DRIVER, gpu.serial)
        for i, gpu in enumerate(h200s(count))
    )


@functools.cache
def amd_identities(count: int) -> tuple[tuple[str, ...], ...]:
    """rocm-exporter's labels of each MI300X (exporters.amd.LABELS), as amdsmi names them."""
    from testkit.fakes.amdsmi import FakeAmdSmi

    smi = FakeAmdSmi(count, token=TOKEN)
    identities = []
    for index, handle in enumerate(smi.amdsmi_get_processor_handles()):
        asic = smi.amdsmi_get_gpu_asic_info(handle)
        uuid = smi.amdsmi_get_gpu_device_uuid(handle)
        identities.append((str(index), uuid, "0", asic["asic_serial"], asic["market_name"], "AMD"))
    return tuple(identities)


def nvidia_gpus(count: int) -> str:
    """dcgm-exporter's page for ``count`` H200s with NVLink, every simulated XID seen once."""
    from exporters.nvidia import NvmlSource, generate_dcgm_latest
    from testkit.fakes.nvml import FakeNvml

    gpus = h200s(count)
    nvml = FakeNvml(gpus, driver=NVIDIA_DRIVER)
    nvml.pending_xids = [(index, xid) for index in range(count) for xid in XIDS]
    source = NvmlSource(HOST, nvml=nvml)
    return scrape(Exporter("dcgm-exporter", [source], exposition=generate_dcgm_latest))


def amd_gpus(count: int) -> str:
    """rocm-exporter's page for ``count`` MI300Xs through amdsmi."""
    from exporters.amd import AmdGpuSource
    from testkit.fakes.amdsmi import FakeAmdSmi

    roots = Roots(
        sys_root=str(FIXTURES / "sysfs-amd"),
        proc_root=str(FIXTURES / "proc"),
        dev_root=str(FIXTURES / "dev-amd"),
    )
    source = AmdGpuSource(roots, amdsmi=FakeAmdSmi(count, token=TOKEN))
    return scrape(Exporter("rocm-exporter", [source]))


def nics(kind: NicKind, count: int) -> str:
    """nic-exporter's page for ``count`` NICs of ``kind``."""
    from exporters.infiniband import InfinibandSource
    from exporters.nic import RdmaSource

    with tempfile.TemporaryDirectory(prefix="simfleet-sysfs-") as tmp:
        ethtool = build_nic_tree(Path(tmp), kind, count)
        roots = Roots(sys_root=tmp)
        sources = [RdmaSource(roots, ethtool=ethtool.__getitem__), InfinibandSource(roots)]
        return scrape(Exporter("nic-exporter", sources), times=1)


def registration_nics(kind: NicKind, count: int) -> list[dict]:
    """The ``nics`` of the registration, as `mac start agent` finds them on such a node."""
    from maccli.agent.hardware import registration_nic
    from node.hardware import discover_interfaces

    with tempfile.TemporaryDirectory(prefix="simfleet-sysfs-") as tmp:
        build_nic_tree(Path(tmp), kind, count)
        found = discover_interfaces(Roots(sys_root=tmp))
        return [registration_nic(nic) for nic in found if nic.physical]


def host(cpus: int, memory_bytes: int) -> str:
    """sys-exporter's page: the node_exporter families MAC's CPU and memory charts read."""
    registry = CollectorRegistry()
    seconds = Counter(
        "node_cpu_seconds",
        "Seconds the CPUs spent in each mode.",
        ["cpu", "mode"],
        registry=registry,
    )
    for cpu in range(cpus):
        for mode in ("idle", "user", "system"):
            seconds.labels(str(cpu), mode)
    Gauge("node_load1", "1m load average.", registry=registry)
    Gauge("node_memory_MemTotal_bytes", "Memory total.", registry=registry).set(memory_bytes)
    Gauge("node_memory_MemAvailable_bytes", "Memory available.", registry=registry)
    Info("node_uname", "Labeled system information.", registry=registry).info(
        {"nodename": HOST, "sysname": "Linux", "machine": "x86_64"}
    )
    return generate_latest(registry).decode()
