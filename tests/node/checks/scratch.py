"""A node made of files under tmp_path, for the checks: its roots and a recorded `run`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from node.checks import CheckContext
from node.host import Roots
from node.runner import CommandResult


def scratch_context(
    tmp_path: Path,
    run: Callable[[list[str]], CommandResult],
    version: int | None = 252,
) -> CheckContext:
    """Every root a network check reads under tmp_path; `version` is systemd's (None:
    the check finds it out), `run` answers the commands the check runs."""
    extra: dict = {"run": run}
    if version is not None:
        extra["systemd_version"] = version
    roots = Roots(
        proc_root=str(tmp_path / "proc"),
        **{f"{tree}_root": str(tmp_path / tree) for tree in ("etc", "run", "usr", "lib")},
    )
    return CheckContext(roots=roots, extra=extra)


def write(path: Path, text: str) -> None:
    """Write a file of the scratch node, its folders made as needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def snmp(forwarding: str) -> str:
    """/proc/<pid>/net/snmp as the kernel writes it (its first lines), with `forwarding` in
    the Ip: Forwarding column: "1" on, "2" off."""
    ip = (
        "Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams "
        "InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes "
        "ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits"
    )
    values = f"{forwarding} 64 138582 0 4 0 0 0 138578 130490 0 0 0 0 0 0 0 0 0 130490"
    return f"Ip: {ip}\nIp: {values}\nIcmp: InMsgs InErrors\nIcmp: 1 0\n"
