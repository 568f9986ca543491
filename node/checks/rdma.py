"""RDMA byte counters move: the NIC bandwidth chart is flat when they never change.

Reads each RDMA port's sysfs byte counters twice, a short interval apart, through
the node's one discovery (node.hardware), as nic-exporter reads them:
hw_counters/{rx,tx}_bytes (Broadcom Thor2) or counters/port_{rcv,xmit}_data (mlx5 and
other verbs devices). An idle fabric legitimately shows no movement, so that is a
warning that says to look again under load, not a failure.
"""

from __future__ import annotations

import time

from node.checks.base import CheckContext, CheckResult, CheckStatus
from node.hardware import discover_rdma_devices, read_port_counters
from node.host import Roots


def read_counters(roots: Roots) -> dict[str, int]:
    """{"<ibdev>/<port>/<counter file>": bytes} of every port that has sysfs counters."""
    values = {}
    for dev in discover_rdma_devices(roots):
        for port in dev.ports:
            counters = read_port_counters(roots, dev.device, port.port)
            if counters is not None:
                values[f"{dev.device}/{port.port}/{counters.rx_file}"] = counters.rx_bytes
                values[f"{dev.device}/{port.port}/{counters.tx_file}"] = counters.tx_bytes
    return values


def check_rdma_counters(ctx: CheckContext) -> CheckResult:
    title = "RDMA byte counters are moving"
    first = read_counters(ctx.roots)
    if not first:
        return CheckResult(
            "rdma_counters", title, CheckStatus.SKIP, "no RDMA device counters on this node."
        )
    sleep = ctx.extra.get("sleep", time.sleep)
    sleep(float(ctx.extra.get("rdma_interval", 1.0)))
    second = read_counters(ctx.roots)
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
