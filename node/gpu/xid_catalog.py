"""NVIDIA's XID catalog: what each XID means, and the state and action MAC gives it.

Source of the data (facts, not code): NVIDIA, "XID Errors", the XID catalog of the r5xx
drivers, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (sheet
"Catalog", column "Immediate Action"; catalog of October 2025, drivers r535 to r580).
It was read through the copy GPUd generates from that very sheet
(leptonai/gpud, components/accelerator/nvidia/xid/catalog_generated.go, generated
2025-10-29, Apache-2.0), since this machine has no route to docs.nvidia.com. XIDs the
catalog lists as "Unused" are left out: an XID not listed here is judged by
``UNKNOWN`` below. The descriptions are NVIDIA's, shortened.

MAC's verdict for an XID follows NVIDIA's immediate action (``RESOLUTIONS``):

    RESTART_APP          healthy, restart_app      the job's own fault; the GPU is fine
    IGNORE               healthy, none             informational
    RESET_GPU            unhealthy, reset_gpu
    RESTART_BM / _VM     unhealthy, reboot         (BM: bare metal)
    CHECK_MECHANICALS    unhealthy, inspect_hardware
    WORKFLOW_XID_48      unhealthy, reset_gpu      double-bit ECC: reset applies the remap
    WORKFLOW_XID_45      healthy, none             cleanup after another XID: that one counts
    WORKFLOW_NVLINK_ERR  unhealthy, reset_gpu      XID 74
    WORKFLOW_NVLINK5_ERR degraded, reset_gpu       XIDs 144-150: the kernel log's error
                                                   status decides; an NVML event has none
    UPDATE_SWFW          degraded, none
    CHECK_UVM            healthy, restart_app
    XID_154              healthy, none             the recovery-action field says the rest

"Ignored by" marks the XIDs that two well-known tools leave alone:

- GPUd (leptonai/gpud, components/accelerator/nvidia/xid/xid.go at commit 4a8de33,
  2026-08): XIDs it types as warnings or information keep its XID component Healthy;
  only its "fatal" XIDs (``GPUD_FATAL``) make it Unhealthy.
- NVIDIA's Kubernetes device plugin (NVIDIA/k8s-device-plugin, internal/rm/health.go
  at commit 1b826ac, 2026-08): the application errors it never marks a device
  unhealthy for (``DEVICE_PLUGIN_IGNORED``).

docs/gpu-health.md shows the whole table (tests/node/gpu/test_xid_catalog.py keeps the
two in step).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from contract.verdicts import HealthAction, HealthState

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
CATALOG_VERSION = "NVIDIA XID catalog, r5xx drivers (sheet of 2025-10)"


class Resolution(StrEnum):
    """NVIDIA's "Immediate Action" values."""

    RESTART_APP = "RESTART_APP"
    IGNORE = "IGNORE"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    RESTART_VM = "RESTART_VM"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    UPDATE_SWFW = "UPDATE_SWFW"
    CHECK_UVM = "CHECK_UVM"
    XID_154 = "XID_154"
    NONE_GIVEN = ""  # newer XIDs the sheet lists without an action yet


H, D, U = HealthState.HEALTHY, HealthState.DEGRADED, HealthState.UNHEALTHY
A = HealthAction
RESOLUTIONS: dict[Resolution, tuple[HealthState, HealthAction]] = {
    Resolution.RESTART_APP: (H, A.RESTART_APP),
    Resolution.IGNORE: (H, A.NONE),
    Resolution.RESET_GPU: (U, A.RESET_GPU),
    Resolution.RESTART_BM: (U, A.REBOOT),
    Resolution.RESTART_VM: (U, A.REBOOT),
    Resolution.CHECK_MECHANICALS: (U, A.INSPECT_HARDWARE),
    Resolution.WORKFLOW_XID_48: (U, A.RESET_GPU),
    Resolution.WORKFLOW_XID_45: (H, A.NONE),
    Resolution.WORKFLOW_NVLINK_ERR: (U, A.RESET_GPU),
    Resolution.WORKFLOW_NVLINK5_ERR: (D, A.RESET_GPU),
    Resolution.UPDATE_SWFW: (D, A.NONE),
    Resolution.CHECK_UVM: (H, A.RESTART_APP),
    Resolution.XID_154: (H, A.NONE),
}

# GPUd's fatal XIDs (the rest it leaves Healthy): xid.go, EventTypeFatal.
GPUD_FATAL = frozenset(
    {32, 38, 44, 46, 48, 60, 62, 63, 64, 68, 69, 74, 78, 79, 94, 95, 110, 119, 120, 121, 140, 143}
)
# NVIDIA's device plugin: "Application errors: the GPU should still be healthy".
DEVICE_PLUGIN_IGNORED = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True)
class Xid:
    """One XID: NVIDIA's words and immediate action, and MAC's state and action for it."""

    code: int
    description: str
    resolution: Resolution
    # MAC's own verdict where NVIDIA's sheet gives none (Resolution.NONE_GIVEN).
    own: tuple[HealthState, HealthAction] | None = None

    @property
    def state(self) -> HealthState:
        return (self.own or RESOLUTIONS[self.resolution])[0]

    @property
    def action(self) -> HealthAction:
        return (self.own or RESOLUTIONS[self.resolution])[1]

    @property
    def ignored_by(self) -> tuple[str, ...]:
        """Which of GPUd and NVIDIA's device plugin leave a GPU healthy on this XID."""
        found = []
        if self.code not in GPUD_FATAL:
            found.append("GPUd")
        if self.code in DEVICE_PLUGIN_IGNORED:
            found.append("k8s-device-plugin")
        return tuple(found)

    @property
    def ignorable(self) -> bool:
        """No operator needs to act: MAC's verdict for it is healthy."""
        return self.state is HealthState.HEALTHY

    def words(self) -> str:
        return f"XID {self.code}: {self.description}"


R = Resolution
_ENTRIES = (
    Xid(8, "GPU stopped processing", R.RESTART_APP),
    Xid(11, "invalid or corrupted push buffer stream", R.RESTART_APP),
    Xid(13, "graphics engine exception", R.RESTART_APP),
    Xid(25, "invalid or illegal push buffer stream", R.RESTART_APP),
    Xid(31, "GPU memory page fault", R.RESTART_APP),
    Xid(32, "invalid or corrupted push buffer stream", R.RESTART_APP),
    Xid(37, "driver firmware error", R.IGNORE),
    Xid(38, "driver firmware error (watchdog timeout)", R.IGNORE),
    Xid(39, "copy engine exception", R.RESTART_APP),
    Xid(40, "copy engine exception", R.RESTART_APP),
    Xid(41, "copy engine exception", R.RESTART_APP),
    Xid(43, "GPU stopped processing", R.IGNORE),
    Xid(44, "graphics engine fault during context switch", R.IGNORE),
    Xid(45, "preemptive cleanup, due to previous errors", R.WORKFLOW_XID_45),
    Xid(46, "GPU stopped processing (timeout)", R.RESET_GPU),
    Xid(48, "double-bit ECC error", R.WORKFLOW_XID_48),
    Xid(54, "auxiliary power is not connected to the GPU board", R.CHECK_MECHANICALS),
    Xid(60, "video processor exception", R.RESTART_APP),
    Xid(62, "internal micro-controller halt", R.RESET_GPU),
    Xid(63, "GPU memory remapping event", R.IGNORE),
    Xid(64, "GPU memory remapping failure", R.RESET_GPU),
    Xid(66, "illegal access by driver", R.IGNORE),
    Xid(67, "illegal access by driver", R.IGNORE),
    Xid(68, "NVDEC0 exception", R.RESTART_APP),
    Xid(69, "graphics engine class error", R.RESTART_APP),
    Xid(70, "copy engine 3 error", R.RESTART_APP),
    Xid(71, "copy engine 4 error", R.RESTART_APP),
    Xid(72, "copy engine 5 error", R.RESTART_APP),
    Xid(74, "NVLink error", R.WORKFLOW_NVLINK_ERR),
    Xid(75, "copy engine 6 error", R.RESTART_APP),
    Xid(76, "copy engine 7 error", R.RESTART_APP),
    Xid(77, "copy engine 8 error", R.RESTART_APP),
    Xid(78, "vGPU start error", R.UPDATE_SWFW),
    Xid(79, "GPU has fallen off the bus", R.RESTART_BM),
    Xid(80, "corrupted data sent to the GPU", R.RESTART_APP),
    Xid(82, "NVJPG0 error", R.RESTART_APP),
    Xid(83, "NVDEC1 error", R.RESTART_APP),
    Xid(84, "NVDEC2 error", R.RESTART_APP),
    Xid(85, "copy engine 9 error", R.RESTART_APP),
    Xid(86, "OFA exception", R.RESTART_APP),
    Xid(88, "NVDEC3 error", R.RESTART_APP),
    Xid(89, "NVDEC4 error", R.RESTART_APP),
    Xid(92, "high single-bit ECC error rate", R.IGNORE),
    Xid(93, "non-fatal violation of the InfoROM wear limit", R.IGNORE),
    Xid(94, "contained memory error", R.RESTART_APP),
    Xid(95, "uncontained memory error", R.RESET_GPU),
    *(Xid(code, f"NVDEC{code - 91} error", R.RESTART_APP) for code in (96, 97, 98)),
    *(Xid(code, f"NVJPG{code - 98} error", R.RESTART_APP) for code in range(99, 106)),
    Xid(106, "SMBPBI test message", R.IGNORE),
    Xid(107, "SMBPBI test message (silent)", R.IGNORE),
    Xid(109, "context switch timeout", R.RESET_GPU),
    Xid(110, "security fault", R.RESET_GPU),
    Xid(119, "GSP RPC timeout", R.RESET_GPU),
    Xid(120, "GSP error", R.RESET_GPU),
    Xid(121, "C2C error", R.IGNORE),
    *(Xid(code, f"copy engine {code - 116} error", R.RESTART_APP) for code in range(126, 136)),
    Xid(136, "NVLink link training failed", R.RESET_GPU),
    Xid(137, "NVLink privilege error", R.IGNORE),
    Xid(139, "OFA1 error", R.RESTART_APP),
    Xid(140, "unrecovered ECC error", R.RESET_GPU),
    Xid(141, "CUDA fast path error", R.IGNORE),
    Xid(143, "GPU initialization error", R.RESET_GPU),
    Xid(144, "NVLink SAW error", R.WORKFLOW_NVLINK5_ERR),
    Xid(145, "NVLink RLW error", R.WORKFLOW_NVLINK5_ERR),
    Xid(146, "NVLink TLW error", R.WORKFLOW_NVLINK5_ERR),
    Xid(147, "NVLink TREX error", R.WORKFLOW_NVLINK5_ERR),
    Xid(148, "NVLink NVLPW_CTRL error", R.WORKFLOW_NVLINK5_ERR),
    Xid(149, "NVLink NETIR error", R.WORKFLOW_NVLINK5_ERR),
    Xid(150, "NVLink MSE error", R.WORKFLOW_NVLINK5_ERR),
    Xid(151, "key rotation error", R.RESTART_VM),
    Xid(152, "DLA SMMU error", R.IGNORE),
    Xid(153, "DLA timeout", R.IGNORE),
    Xid(154, "GPU recovery action changed", R.XID_154),
    Xid(155, "NVLink software-defined error", R.RESET_GPU),
    Xid(156, "resource retirement event", R.RESET_GPU),
    Xid(157, "resource retirement failure", R.IGNORE),
    Xid(158, "GPU fatal timeout", R.RESET_GPU),
    Xid(159, "CHI non-data error", R.CHECK_UVM),
    Xid(160, "channel retirement event", R.IGNORE),
    Xid(161, "channel retirement failure", R.IGNORE),
    # Listed by NVIDIA without an immediate action yet: MAC's own reading of each.
    Xid(162, "power smoothing circuitry re-engaged", R.NONE_GIVEN, (H, A.NONE)),
    Xid(163, "power smoothing circuitry disengaged", R.NONE_GIVEN, (D, A.NONE)),
    Xid(164, "power smoothing circuitry low lifetime", R.NONE_GIVEN, (D, A.NONE)),
    Xid(165, "power smoothing circuitry lifetime exhausted", R.NONE_GIVEN,
        (D, A.INSPECT_HARDWARE)),
    Xid(166, "NVLink traffic before encryption was set up", R.NONE_GIVEN, (H, A.RESTART_APP)),
    Xid(167, "PCIe fatal timeout", R.NONE_GIVEN, (U, A.REBOOT)),
    Xid(168, "reduced GPU memory capacity (errors in the write-protected region)",
        R.NONE_GIVEN, (D, A.INSPECT_HARDWARE)),
    Xid(169, "internal micro-controller (SEC2) halt", R.NONE_GIVEN, (U, A.RESET_GPU)),
    Xid(170, "NVLink interrupt in confidential-computing mode", R.NONE_GIVEN,
        (H, A.RESTART_APP)),
    Xid(171, "uncorrectable DRAM error (details of an XID 48)", R.NONE_GIVEN,
        (U, A.RESET_GPU)),
    Xid(172, "uncorrectable SRAM error (details of an XID 48)", R.NONE_GIVEN,
        (U, A.RESET_GPU)),
)  # fmt: skip
CATALOG: dict[int, Xid] = {entry.code: entry for entry in _ENTRIES}

# An XID the catalog does not list (a newer driver's, or one NVIDIA calls unused): worth a
# look, not a drain.
UNKNOWN = (HealthState.DEGRADED, HealthAction.NONE)


def lookup(code: int) -> Xid:
    """The catalog's entry, or one judged by UNKNOWN for an XID it does not list."""
    found = CATALOG.get(code)
    if found is not None:
        return found
    return Xid(code, "not in MAC's XID catalog (see NVIDIA's XID errors)", R.NONE_GIVEN, UNKNOWN)


def ignorable_xids() -> list[int]:
    """The XIDs whose verdict is healthy: GpuXidError does not fire for them (alerts.yml)."""
    return sorted(code for code, entry in CATALOG.items() if entry.ignorable)


def markdown_table() -> str:
    """The catalog as docs/gpu-health.md shows it (`python -m node.gpu.xid_catalog`)."""
    lines = [
        "| XID | NVIDIA's description | NVIDIA's immediate action | state | action | ignored by |",
        "|---:|---|---|---|---|---|",
    ]
    for entry in CATALOG.values():
        given = entry.resolution.value or "(none yet: MAC's own)"
        ignored = ", ".join(entry.ignored_by) or "-"
        lines.append(
            f"| {entry.code} | {entry.description} | {given} | {entry.state} | {entry.action} "
            f"| {ignored} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
