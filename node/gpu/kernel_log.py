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
start with a space: the kernel's ``Documentation/ABI/testing/dev-kmsg``). Its timestamp
is the kernel's own clock (``local_clock``), which starts at boot as CLOCK_MONOTONIC
(``time.monotonic()``, the judge's windows) does but is not it: the two drift apart by
parts per million, seconds over weeks, nothing against an evidence window of an hour. So
a record is never left out for its time: the log is read to its end.

Only records the kernel itself logged (facility 0) count: root may write any line to
/dev/kmsg, and a record written from user space carries facility 1 or above.

A GPU reset is the repair of most XIDs (``reset_gpu``), and nothing in the kernel log
says one happened. So `mac gpu reset` writes one line of its own there once the reset
succeeded (``mark_reset``: ``mac: GPU reset PCI:0000:3b:00 ...``, from user space), and
the XIDs that GPU logged before it come marked ``reset``: the exporter it starts again
leaves out those a reset repairs (exporters.nvidia). A reboot needs no such line: the
log starts again with the boot.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, replace
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
# Past the largest ring buffer the kernel takes (log_buf_len, 2^25), then some: the end.
MAX_BYTES = 64 << 20

PciAddress = tuple[int, int, int]  # (domain, bus, device): how the driver names a GPU


@dataclass(frozen=True)
class KernelXid:
    """One XID line of the kernel log."""

    pci: PciAddress
    code: int
    since_boot: float  # seconds, on the kernel's clock (see the module docstring)
    text: str  # the driver's line, for the log
    reset: bool = False  # `mac gpu reset` reset its GPU after it


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


def read_kernel_xids(path: Path) -> list[KernelXid]:
    """Every XID record in the kernel log at ``path``, to its end: /dev/kmsg, or a file of
    records in its format (tests). An XID logged before `mac gpu reset`'s line for its GPU
    comes marked ``reset``. Raises OSError where it cannot be opened (no CAP_SYSLOG with
    kernel.dmesg_restrict=1, printk.devkmsg=off, no /dev/kmsg in a container): the caller
    says what that costs.

    Reads without blocking until the kernel has nothing more, or MAX_BYTES: a log that
    never stops growing cannot hold the read.
    """
    found: list[KernelXid] = []
    with closing(_lines(path)) as lines:
        for line in lines:
            header = _HEADER.match(line)
            if header is None:
                continue  # a continuation line (" SUBSYSTEM=pci"...)
            reset = _RESET.match(line, header.end())
            if reset is not None:  # the GPU was reset: what it logged before, the reset saw
                pci = _address(reset)
                found = [replace(xid, reset=True) if xid.pci == pci else xid for xid in found]
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
        pending, read = b"", 0
        while read < MAX_BYTES:
            try:
                chunk = os.read(fd, _READ)
            except BlockingIOError:
                break  # /dev/kmsg: nothing more logged
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # records overwritten while reading: the read goes on after them
                raise
            if not chunk:
                if pending:
                    yield pending  # a plain file's last line, whole
                break  # a plain file's end
            read += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            yield from lines
    finally:
        os.close(fd)
