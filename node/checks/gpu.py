"""GPU plumbing the exporters need: NVIDIA Container Toolkit, /dev/kfd and /dev/dri, amdgpu;
and what the running GPU exporter says it cannot use (its backends).

The GPUs are counted by the node's hardware discovery (node.hardware), the same
that the registration reports and rocm-exporter reads.
"""

from __future__ import annotations

import http.client
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from node.checks.base import CheckContext, CheckResult, CheckStatus, config, timeout, which
from node.hardware import amd_gpu_count, nvidia_gpu_count

# The GPU exporter of each vendor, and its own word on what it can use: 0 with the reason.
GPU_EXPORTERS = {"nvidia": "dcgm-exporter", "amd": "rocm-exporter"}
BACKENDS_QUERY = "/metrics?name[]=mac_exporter_backend_available"

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


def check_gpu_backends(ctx: CheckContext) -> list[CheckResult]:
    """Each running GPU exporter can use its backends: NVML (or amdsmi and the amdgpu
    driver), and for NVIDIA the kernel log (the XIDs from before it started). One it
    cannot use is a warning with the exporter's own reason: the verdicts then miss what
    that backend would have said."""
    wanted = ctx.extra.get("services")
    counts = {"nvidia": nvidia_gpu_count(ctx.roots), "amd": amd_gpu_count(ctx.roots)}
    results = []
    for vendor, service in GPU_EXPORTERS.items():
        if not counts[vendor] or (wanted is not None and service not in wanted):
            continue
        check_id, title = f"gpu_backends:{service}", f"{service} can use its backends"
        port = config(ctx).service_port(service)
        url = f"http://{ctx.extra.get('service_host', '127.0.0.1')}:{port}{BACKENDS_QUERY}"
        try:
            # Past the exporter's own collector deadline (5 s), so that a hung collector
            # answers with its reason before this gives up.
            with urllib.request.urlopen(url, timeout=timeout(ctx) + 3) as answer:
                page = answer.read().decode(errors="replace")
        except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
            why = f"{url}: no answer ({exc}); service:{service} says why"
            results.append(CheckResult(check_id, title, CheckStatus.SKIP, why))
            continue
        try:
            backends = [
                (sample.labels.get("backend", "?"), sample.labels.get("reason", ""), sample.value)
                for family in text_string_to_metric_families(page)
                for sample in family.samples
            ]
        except ValueError as exc:  # not an exporter's page: whatever answers on its port
            why = f"{url} answered something that is not Prometheus text ({exc})"
            results.append(CheckResult(check_id, title, CheckStatus.WARN, why))
            continue
        down = [(name, reason) for name, reason, up in backends if not up]
        if down:
            detail = "; ".join(f"{name}: {reason or 'no reason given'}" for name, reason in down)
            fix = [f"mac logs {service} -n 50"]
            if any(name == "kernel_log" for name, _ in down):
                # Root reads it (CAP_SYSLOG); the container gets it from the compose file.
                fix.append("sudo mac restart agent   # the kernel log needs root, or CAP_SYSLOG")
            else:
                fix.append("mac restart agent")
            results.append(CheckResult(check_id, title, CheckStatus.WARN, detail, "\n".join(fix)))
            continue
        names = ", ".join(name for name, _, _ in backends) or "none reported yet"
        results.append(CheckResult(check_id, title, CheckStatus.PASS, f"available: {names}"))
    return results


check_gpu_backends.check_id = "gpu_backends"  # type: ignore[attr-defined]  # gpu_backends:<name>

CHECKS = (check_nvidia_toolkit, check_amd_devices, check_amdgpu_module, check_gpu_backends)
