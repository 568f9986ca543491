"""RDMA byte counters move: the NIC bandwidth chart is flat when they never change.

Reads /sys/class/infiniband/<ibdev>/ports/<n>/hw_counters/{rx,tx}_bytes (Broadcom
Thor2) and counters/port_{rcv,xmit}_data (mlx5 and other verbs devices) twice, a
short interval apart. An idle fabric legitimately shows no movement, so that is a
warning that says to look again under load, not a failure.
"""

from __future__ import annotations

import time
from pathlib import Path

from exporters.checks import CheckContext, CheckResult, CheckStatus

COUNTER_FILES = (
    "hw_counters/rx_bytes",
    "hw_counters/tx_bytes",
    "counters/port_rcv_data",
    "counters/port_xmit_data",
)


def read_counters(sys_root: str) -> dict[str, int]:
    values = {}
    base = Path(sys_root, "class/infiniband")
    for port in sorted(base.glob("*/ports/*")) if base.is_dir() else []:
        for name in COUNTER_FILES:
            path = port / name
            try:
                values[f"{port.parent.parent.name}/{port.name}/{name}"] = int(
                    path.read_text().strip()
                )
            except (OSError, ValueError):
                continue
    return values


def check_rdma_counters(ctx: CheckContext) -> CheckResult:
    title = "RDMA byte counters are moving"
    first = read_counters(ctx.sys_root)
    if not first:
        return CheckResult(
            "rdma_counters", title, CheckStatus.SKIP, "no RDMA device counters on this node."
        )
    sleep = ctx.extra.get("sleep", time.sleep)
    sleep(float(ctx.extra.get("rdma_interval", 1.0)))
    second = read_counters(ctx.sys_root)
    moved = sorted(k for k, v in second.items() if k in first and v != first[k])
    devices = sorted({key.split("/", 1)[0] for key in first})
    if moved:
        return CheckResult(
            "rdma_counters", title, CheckStatus.PASS, f"moving: {', '.join(moved[:4])}"
        )
    return CheckResult(
        "rdma_counters",
        title,
        CheckStatus.WARN,
        f"no counter of {', '.join(devices)} changed: idle, or the exporter cannot see traffic.",
        "# run again while RDMA traffic flows, and compare with the NIC's own counters:\n"
        "mac doctor\n"
        "docker exec mac-nic-exporter ethtool -S <iface> | grep -i rdma",
    )


CHECKS = (check_rdma_counters,)
