"""GPU plumbing the exporters need: NVIDIA Container Toolkit, /dev/kfd and /dev/dri, amdgpu.

Detection reads sysfs and procfs only (no driver library), so it also serves the
registration payload's gpu_vendor and gpu_count on nodes whose driver is broken. AMD
cards are found by rocm-exporter's own walk (exporters.amd.amd_cards).
"""

from __future__ import annotations

import re
from pathlib import Path

from exporters.amd import AMD_PCI_VENDOR, amd_cards
from exporters.checks.base import CheckContext, CheckResult, CheckStatus, which
from exporters.runtime import Roots

NVIDIA_PCI_VENDOR = "0x10de"


def _pci_display_devices(sys_root: str, vendor: str) -> set[str]:
    """PCI addresses of display controllers (class 0x03xxxx) from one vendor."""
    found = set()
    base = Path(sys_root, "bus/pci/devices")
    for device in base.glob("*") if base.is_dir() else []:
        try:
            if (device / "vendor").read_text().strip().lower() != vendor:
                continue
            if not (device / "class").read_text().strip().lower().startswith("0x03"):
                continue
        except OSError:
            continue
        found.add(device.name)
    return found


def amd_gpu_count(sys_root: str) -> int:
    """The DRM cards rocm-exporter reads, plus AMD display devices the driver never bound."""
    cards = {device.resolve().name for _, device in amd_cards(Roots(sys_root=sys_root))}
    return len(cards | _pci_display_devices(sys_root, AMD_PCI_VENDOR))


def nvidia_gpu_count(proc_root: str, dev_root: str, sys_root: str) -> int:
    gpus_dir = Path(proc_root, "driver/nvidia/gpus")
    from_driver = len(list(gpus_dir.iterdir())) if gpus_dir.is_dir() else 0
    dev = Path(dev_root)
    nodes = [p for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)]
    from_pci = len(_pci_display_devices(sys_root, NVIDIA_PCI_VENDOR))
    return max(from_driver, len(nodes), from_pci)


def detect_gpus(
    proc_root: str = "/proc", sys_root: str = "/sys", dev_root: str = "/dev"
) -> tuple[str, int]:
    """("nvidia"|"amd"|"none", count) as the registration API wants them."""
    nvidia = nvidia_gpu_count(proc_root, dev_root, sys_root)
    if nvidia:
        return "nvidia", nvidia
    amd = amd_gpu_count(sys_root)
    if amd:
        return "amd", amd
    return "none", 0


TOOLKIT_PROGRAMS = ("nvidia-ctk", "nvidia-container-runtime-hook", "nvidia-container-runtime")


def check_nvidia_toolkit(ctx: CheckContext) -> CheckResult:
    title = "NVIDIA Container Toolkit is installed"
    count = nvidia_gpu_count(ctx.proc_root, ctx.dev_root, ctx.sys_root)
    if not count:
        return CheckResult("nvidia_toolkit", title, CheckStatus.SKIP, "no NVIDIA GPU on this node.")
    if not which(ctx, "docker"):
        return CheckResult(
            "nvidia_toolkit",
            title,
            CheckStatus.SKIP,
            f"{count} NVIDIA GPU(s) but no Docker: the process runtime reads NVML directly.",
        )
    found = [program for program in TOOLKIT_PROGRAMS if which(ctx, program)]
    if found:
        return CheckResult(
            "nvidia_toolkit", title, CheckStatus.PASS, f"{count} NVIDIA GPU(s); found {found[0]}"
        )
    return CheckResult(
        "nvidia_toolkit",
        title,
        CheckStatus.FAIL,
        f"{count} NVIDIA GPU(s) but none of {', '.join(TOOLKIT_PROGRAMS)} is installed: "
        "dcgm-exporter's container cannot see the GPUs.",
        "sudo apt install nvidia-container-toolkit\n"
        "sudo nvidia-ctk runtime configure --runtime=docker\n"
        "sudo systemctl restart docker\n"
        "mac restart agent",
    )


def check_amd_devices(ctx: CheckContext) -> CheckResult:
    title = "/dev/kfd and /dev/dri exist for rocm-exporter"
    count = amd_gpu_count(ctx.sys_root)
    if not count:
        return CheckResult("amd_devices", title, CheckStatus.SKIP, "no AMD GPU on this node.")
    kfd = Path(ctx.dev_root, "kfd")
    dri = Path(ctx.dev_root, "dri")
    render = sorted(p.name for p in dri.glob("renderD*")) if dri.is_dir() else []
    missing = [str(p) for p, ok in ((kfd, kfd.exists()), (dri, bool(render))) if not ok]
    if not missing:
        return CheckResult(
            "amd_devices",
            title,
            CheckStatus.PASS,
            f"{count} AMD GPU(s); {kfd} and {dri} ({', '.join(render)})",
        )
    return CheckResult(
        "amd_devices",
        title,
        CheckStatus.FAIL,
        f"{count} AMD GPU(s) but {' and '.join(missing)} missing or empty: the amdgpu driver "
        "did not create them.",
        "lsmod | grep amdgpu\nsudo modprobe amdgpu\nls -l /dev/kfd /dev/dri\nmac restart agent",
    )


def check_amdgpu_module(ctx: CheckContext) -> CheckResult:
    title = "the amdgpu kernel module is loaded"
    count = amd_gpu_count(ctx.sys_root)
    if not count:
        return CheckResult("amdgpu_module", title, CheckStatus.SKIP, "no AMD GPU on this node.")
    try:
        modules = Path(ctx.proc_root, "modules").read_text()
    except OSError as exc:
        return CheckResult("amdgpu_module", title, CheckStatus.SKIP, f"cannot read modules: {exc}")
    loaded = any(line.split(" ", 1)[0] == "amdgpu" for line in modules.splitlines())
    if loaded or Path(ctx.sys_root, "module/amdgpu/initstate").exists():
        return CheckResult("amdgpu_module", title, CheckStatus.PASS, "amdgpu is loaded")
    return CheckResult(
        "amdgpu_module",
        title,
        CheckStatus.FAIL,
        f"{count} AMD GPU(s) but amdgpu is not in {Path(ctx.proc_root, 'modules')}.",
        "sudo modprobe amdgpu\nlsmod | grep amdgpu\n"
        "# if modprobe fails, install the driver: sudo apt install amdgpu-dkms",
    )


CHECKS = (check_nvidia_toolkit, check_amd_devices, check_amdgpu_module)
