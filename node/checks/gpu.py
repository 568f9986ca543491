"""GPU plumbing the exporters need: NVIDIA Container Toolkit, /dev/kfd and /dev/dri, amdgpu.

The GPUs are counted by the node's hardware discovery (node.hardware), the same
that the registration reports and rocm-exporter reads.
"""

from __future__ import annotations

from node.checks.base import CheckContext, CheckResult, CheckStatus, which
from node.hardware import amd_gpu_count, nvidia_gpu_count

TOOLKIT_PROGRAMS = ("nvidia-ctk", "nvidia-container-runtime-hook", "nvidia-container-runtime")


def check_nvidia_toolkit(ctx: CheckContext) -> CheckResult:
    title = "NVIDIA Container Toolkit is installed"
    count = nvidia_gpu_count(ctx.roots)
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
    count = amd_gpu_count(ctx.roots)
    if not count:
        return CheckResult("amd_devices", title, CheckStatus.SKIP, "no AMD GPU on this node.")
    kfd = ctx.roots.dev("kfd")
    dri = ctx.roots.dev("dri")
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
    count = amd_gpu_count(ctx.roots)
    if not count:
        return CheckResult("amdgpu_module", title, CheckStatus.SKIP, "no AMD GPU on this node.")
    try:
        modules = ctx.roots.proc("modules").read_text()
    except OSError as exc:
        return CheckResult("amdgpu_module", title, CheckStatus.SKIP, f"cannot read modules: {exc}")
    loaded = any(line.split(" ", 1)[0] == "amdgpu" for line in modules.splitlines())
    if loaded or ctx.roots.sys("module/amdgpu/initstate").exists():
        return CheckResult("amdgpu_module", title, CheckStatus.PASS, "amdgpu is loaded")
    return CheckResult(
        "amdgpu_module",
        title,
        CheckStatus.FAIL,
        f"{count} AMD GPU(s) but amdgpu is not in {ctx.roots.proc('modules')}.",
        "sudo modprobe amdgpu\nlsmod | grep amdgpu\n"
        "# if modprobe fails, install the driver: sudo apt install amdgpu-dkms",
    )


CHECKS = (check_nvidia_toolkit, check_amd_devices, check_amdgpu_module)
