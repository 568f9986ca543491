"""Reading the driver's XID lines back from the kernel log (/dev/kmsg's record format)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from node.gpu import kernel_log
from node.gpu.kernel_log import (
    KernelXid,
    mark_reset,
    parse_record,
    pci_address,
    read_kernel_xids,
    reset_line,
)

# Lines in the driver's own format (src/nvidia/src/kernel/gpu/rc/kernel_rc.c), as kmsg
# records: "<prio>,<seq>,<usec since boot>,<flags>;<text>"; prio 3 and 4 are the kernel's
# (facility 0) err and warning.
XID_79 = b"4,1201,3600250000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
XID_13_MIG = (
    b"4,1202,3700000000,-;NVRM: Xid (PCI:0000:19:00 GPU-I:01 GPU-CI:00): 13, pid=4242, "
    b"name=python3, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address"
)
CONTINUATION = b" SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0"


def kmsg(tmp_path: Path, *records: bytes) -> Path:
    path = tmp_path / "kmsg"
    path.write_bytes(b"".join(record + b"\n" for record in records))
    return path


def test_an_xid_record_names_the_gpu_by_its_pci_address_and_its_time_since_boot():
    xid = parse_record(XID_79)
    assert xid == KernelXid(
        pci=(0, 0x3B, 0), code=79, since_boot=3600.25,
        text="NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.",
    )  # fmt: skip
    assert pci_address("00000000:3B:00.0") == xid.pci  # NVML's bus id of the same GPU


def test_a_mig_instances_xid_is_its_gpus():
    xid = parse_record(XID_13_MIG)
    assert (xid.pci, xid.code, xid.since_boot) == ((0, 0x19, 0), 13, 3700.0)


@pytest.mark.parametrize(
    "record",
    [
        # written from user space (facility 1, "user"): anyone with root can write a line
        b"12,1203,3600300000,-;NVRM: Xid (PCI:0000:3b:00): 79, forged",
        b"6,1204,3600400000,-;nvidia-nvlink: Nvlink Core is being initialized",
        b"4,1205,3600500000,-;NVRM: GPU at PCI:0000:3b:00: GPU-5d2f7b1e",
        b" SUBSYSTEM=pci",  # a continuation line
        b"not a record at all",
    ],
)
def test_other_records_are_no_xid(record):
    assert parse_record(record) is None


@pytest.mark.parametrize("bus_id", ["", "3B:00.0", "0000:zz:00.0"])
def test_a_bus_id_that_cannot_be_read_names_no_address(bus_id):
    assert pci_address(bus_id) is None


def test_the_log_is_read_to_its_end_across_continuation_lines(tmp_path):
    path = kmsg(tmp_path, b"6,1,0,-;Linux version 6.1.0", XID_79 + b"\n" + CONTINUATION,
                XID_13_MIG)  # fmt: skip
    found = read_kernel_xids(path)
    assert [(xid.code, xid.since_boot) for xid in found] == [(79, 3600.25), (13, 3700.0)]


def test_the_log_is_read_to_its_end_whatever_its_records_times(tmp_path):
    """The log's clock is the kernel's, not quite the monotonic one: a record is never left
    out for its time (a reset line dated a second "in the future" must still count)."""
    path = kmsg(tmp_path, XID_13_MIG, XID_79)  # not in time order
    assert [xid.code for xid in read_kernel_xids(path)] == [13, 79]


def test_a_log_that_never_stops_growing_cannot_hold_the_read(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_log, "MAX_BYTES", 100)
    path = kmsg(tmp_path, *[XID_79] * 500)  # one 8 KiB read is past MAX_BYTES
    found = read_kernel_xids(path)
    assert 1 <= len(found) < 500 and {xid.code for xid in found} == {79}  # no cut record


def test_a_record_cut_between_two_reads_is_read_whole(tmp_path):
    filler = b"6,1,1,-;" + b"x" * 8170  # the XID record crosses the 8 KiB read
    path = kmsg(tmp_path, filler, XID_79)
    assert [xid.code for xid in read_kernel_xids(path)] == [79]


def test_a_log_that_cannot_be_opened_raises_for_the_caller_to_say_so(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_kernel_xids(tmp_path / "kmsg")


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="needs read access to /dev/kmsg")
def test_the_hosts_own_dev_kmsg_is_read_to_its_end_without_blocking():
    """The real device: one record per read, EAGAIN at the end (O_NONBLOCK). Only read;
    what it holds is the host's (no XID is assumed)."""
    found = read_kernel_xids(Path("/dev/kmsg"))
    assert all(isinstance(xid, KernelXid) for xid in found)


def as_record(line: bytes, seq: int, usec: int) -> bytes:
    """What the kernel makes of a line written to /dev/kmsg: "<13>text" -> "13,seq,usec,-;text"."""
    prio, text = line.rstrip(b"\n")[1:].split(b">", 1)
    return b"%s,%d,%d,-;%s" % (prio, seq, usec, text)


def test_a_gpu_reset_repairs_the_xids_its_gpu_logged_before_it(tmp_path):
    reset = as_record(reset_line((0, 0x3B, 0), "nvidia-smi -r -i 1"), 1300, 3650000000)
    xid_48_later = b"4,1301,3660000000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=7, DBE"
    path = kmsg(tmp_path, XID_79, XID_13_MIG, reset, xid_48_later)

    found = read_kernel_xids(path)

    # GPU 3b's XID 79 was before its reset (whether the reset repairs it is the exporter's
    # call); GPU 19's XID 13 is another GPU's.
    assert [(xid.pci, xid.code, xid.reset) for xid in found] == [
        ((0, 0x3B, 0), 79, True), ((0, 0x19, 0), 13, False), ((0, 0x3B, 0), 48, False)
    ]  # fmt: skip


def test_the_reset_line_is_user_spaces_notice_naming_the_gpu_as_the_driver_does():
    line = reset_line((0, 0x3B, 0), "nvidia-smi -r -i 1")
    assert line == b"<13>mac: GPU reset PCI:0000:3b:00 (nvidia-smi -r -i 1)\n"
    # Not an XID itself, whoever reads the log.
    assert parse_record(as_record(line, 1, 1)) is None


def test_mark_reset_appends_one_line_and_never_creates_the_log(tmp_path):
    path = kmsg(tmp_path, XID_79)
    mark_reset(path, (0, 0x3B, 0), "nvidia-smi -r -i 1")
    assert path.read_bytes() == XID_79 + b"\n" + reset_line((0, 0x3B, 0), "nvidia-smi -r -i 1")
    with pytest.raises(FileNotFoundError):
        mark_reset(tmp_path / "no-kmsg", (0, 0x3B, 0), "nvidia-smi -r -i 1")
    assert not (tmp_path / "no-kmsg").exists()
