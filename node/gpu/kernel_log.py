"""The XIDs the NVIDIA driver logged since boot, read back from the kernel log.

NVML hands an exporter only the XID events that happen while it is registered for them:
an XID 95 logged a minute before the agent restarted (an upgrade, a crash, a reboot of
the agent's containers) would be gone from the verdict, and the node would never be
drained for it. The driver also prints every XID to the kernel log, which holds the
whole boot (as far as its ring buffer reaches), so the exporter reads it once when it
starts (exporters.nvidia) and hands the judge those still within the evidence window.

The driver's line, from NVIDIA's open kernel modules (``src/nvidia/src/kernel/gpu/rc/
kernel_rc.c``): ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, ...``, with `` GPU-I:%02u
GPU-CI:%02u`` inside the parenthesis on a MIG instance. ``/dev/kmsg`` gives one record per
read, ``<prio>,<seq>,<microseconds since boot>,<flags>;<text>`` (continuation lines
start with a space: the kernel's ``Documentation/ABI/testing/dev-kmsg``); its timestamp is
on the clock ``time.monotonic()`` reads, which is what the judge's windows run on.

Only records the kernel itself logged (facility 0) count: root may write any line to
/dev/kmsg, and a record written from user space carries facility 1 or above.

A GPU reset is the repair of most XIDs (``reset_gpu``), and nothing in the kernel log
says one happened. So `mac gpu reset` writes one line of its own there once the reset
succeeded (``mark_reset``: ``mac: GPU reset PCI:0000:3b:00 ...``, from user space), and
the exporter it starts again reads the log back without the XIDs that GPU logged before
it: the reset repaired them. A reboot needs no such line: the log starts again with the
boot.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

_XID = re.compile(
    rb"NVRM: Xid \((?:PCI:)?(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):"
    rb"(?P<device>[0-9a-fA-F]{2})(?:\.[0-7])?[^)]*\): (?P<code>\d+)"
)
# MAC's own line for a GPU reset (mark_reset): any facility, since it is written from
# user space; only root may write to /dev/kmsg, and it only ever clears evidence.
_RESET = re.compile(
    rb"mac: GPU reset PCI:(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):"
    rb"(?P<device>[0-9a-fA-F]{2})\b"
)
_USER_NOTICE = 13  # facility user (1) * 8 + level notice (5)
_HEADER = re.compile(rb"(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;")
_KERNEL = 0  # syslog facility of the kernel's own messages (prio = facility * 8 + level)
_READ = 8192  # one kmsg record is at most 8 KiB (CONSOLE_EXT_LOG_MAX, kernel printk)

PciAddress = tuple[int, int, int]  # (domain, bus, device): how the driver names a GPU


@dataclass(frozen=True)
class KernelXid:
    """One XID line of the kernel log."""

    pci: PciAddress
    code: int
    since_boot: float  # seconds, on the monotonic clock
    text: str  # the driver's line, for the log


def pci_address(bus_id: str) -> PciAddress | None:
    """NVML's ``00000000:3B:00.0`` as the driver's log names it; None where unparsable."""
    parts = bus_id.strip().split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2].split(".")[0], 16)
    except ValueError:
        return None


def parse_record(record: bytes) -> KernelXid | None:
    """The XID in one kmsg record (its first line), None for anything else."""
    header = _HEADER.match(record)
    return None if header is None else _xid(header, record)


def _xid(header: re.Match, record: bytes) -> KernelXid | None:
    if int(header["prio"]) >> 3 != _KERNEL:
        return None
    text = record[header.end() :].split(b"\n", 1)[0]
    found = _XID.search(text)
    if found is None:
        return None
    return KernelXid(
        pci=_address(found),
        code=int(found["code"]),
        since_boot=_seconds(header),
        text=text.decode(errors="replace").strip(),
    )


def _address(found: re.Match) -> PciAddress:
    return int(found["domain"], 16), int(found["bus"], 16), int(found["device"], 16)


def _seconds(header: re.Match) -> float:
    return int(header["usec"]) / 1e6


def read_kernel_xids(path: Path, until: float) -> list[KernelXid]:
    """Every XID record in the kernel log at ``path`` logged up to ``until`` (seconds since
    boot) and not repaired since by a GPU reset (`mac gpu reset`'s line): /dev/kmsg, or a
    file of records in its format (tests). Raises OSError where it cannot be opened (no
    CAP_SYSLOG with kernel.dmesg_restrict=1, no /dev/kmsg in a container): the caller says
    what that costs.

    Reads without blocking to the end of what the kernel holds, and stops at the first
    record logged after ``until``: those reach the caller as NVML events, and a log that
    never stops growing cannot hold the read.
    """
    found: list[KernelXid] = []
    with closing(_lines(path)) as lines:
        for line in lines:
            header = _HEADER.match(line)
            if header is None:
                continue  # a continuation line (" SUBSYSTEM=pci"...)
            if _seconds(header) > until:
                break
            reset = _RESET.match(line, header.end())
            if reset is not None:  # the GPU was reset: what it logged before is repaired
                pci = _address(reset)
                found = [xid for xid in found if xid.pci != pci]
                continue
            xid = _xid(header, line)
            if xid is not None:
                found.append(xid)
    return found


def reset_line(pci: PciAddress, how: str) -> bytes:
    """What `mac gpu reset` writes to /dev/kmsg once ``how`` reset the GPU at ``pci``: the
    kernel makes it a record of facility user, level notice (``<13>``)."""
    domain, bus, device = pci
    return (
        f"<{_USER_NOTICE}>mac: GPU reset PCI:{domain:04x}:{bus:02x}:{device:02x} ({how})\n".encode()
    )


def mark_reset(path: Path, pci: PciAddress, how: str) -> None:
    """Log, in the kernel log at ``path`` (/dev/kmsg: root only), that ``how`` reset the GPU
    at ``pci``. Raises OSError where it cannot be written; never creates the file."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, reset_line(pci, how))
    finally:
        os.close(fd)


def _lines(path: Path) -> Iterator[bytes]:
    """The log's lines: /dev/kmsg gives one whole record per read, a plain file may cut
    one between two reads (the rest is kept for the next)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        pending = b""
        while True:
            try:
                chunk = os.read(fd, _READ)
            except BlockingIOError:
                break  # /dev/kmsg: nothing more logged
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # records overwritten while reading: the read goes on after them
                raise
            if not chunk:
                break  # a plain file's end
            *lines, pending = (pending + chunk).split(b"\n")
            yield from lines
        if pending:
            yield pending
    finally:
        os.close(fd)
