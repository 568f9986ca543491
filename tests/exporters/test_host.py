"""sys-exporter: /proc parsers, the hung-mount guard, golden output and this machine."""

from __future__ import annotations

import os
import platform
import threading
import time

from exporters.host import sources
from exporters.host.cpu import parse_stat
from exporters.host.disk import parse_diskstats
from exporters.host.filesystem import FilesystemSource, parse_mounts
from exporters.host.memory import parse_loadavg, parse_meminfo
from exporters.host.network import parse_net_dev
from exporters.runtime import Exporter, Roots
from tests.exporters.conftest import FIXTURES, assert_golden, scrape_text

PROC = FIXTURES / "proc"
FIXTURE_ROOTS = Roots(
    sys_root=str(FIXTURES / "sysfs-net"),
    proc_root=str(PROC),
    dev_root=str(FIXTURES / "dev-amd"),
    rootfs=str(FIXTURES / "rootfs"),
)
# Recorded statvfs answers of the fixture's mounts (f_bsize, f_frsize, f_blocks, f_bfree,
# f_bavail, f_files, f_ffree, f_favail, f_flag, f_namemax).
STATVFS = {
    "/": (4096, 4096, 483183820, 402653184, 378101248, 120586240, 118122041, 118122041, 4096, 255),
    "/boot/efi": (4096, 4096, 261628, 259011, 259011, 0, 0, 0, 4096, 255),
    "/scratch": (4096, 4096, 1875366400, 1501029120, 1501029120, 750146560, 750000112, 750000112,
                 4096, 255),
    "/home": (1048576, 1048576, 104857600, 52428800, 52428800, 3276800, 3000000, 3000000,
              4096, 255),
    "/run": (4096, 4096, 52836608, 52830012, 52830012, 264175028, 264173110, 264173110, 4102, 255),
    "/run/user/1000": (4096, 4096, 52836607, 52836600, 52836600, 52836607, 52836580, 52836580,
                       4102, 255),
}  # fmt: skip


def recorded_statvfs(path: str) -> os.statvfs_result:
    mountpoint = "/" + os.path.relpath(path, FIXTURES / "rootfs").removeprefix(".")
    return os.statvfs_result(STATVFS[mountpoint.rstrip("/") or "/"])


def test_parse_stat_gives_seconds_per_cpu_and_mode():
    stat = parse_stat((PROC / "stat").read_text(), user_hz=100)
    assert sorted(stat.cpus) == ["0", "1", "2", "3"]
    assert stat.cpus["0"]["user"] == 185119.31
    assert stat.cpus["3"]["idle"] == 5729140.68
    assert stat.boot_time == 1795180800
    assert stat.context_switches == 18273302919
    assert stat.procs_running == 3


def test_parse_meminfo_uses_node_exporter_names():
    mem = parse_meminfo((PROC / "meminfo").read_text())
    assert mem["MemTotal_bytes"] == 2113464316 * 1024
    assert mem["Active_anon_bytes"] == 66920128 * 1024
    assert mem["SwapFree_bytes"] == 8388604 * 1024
    assert mem["HugePages_Total"] == 0


def test_parse_loadavg_and_diskstats():
    assert parse_loadavg((PROC / "loadavg").read_text()) == (12.47, 11.93, 10.02)
    disks = parse_diskstats((PROC / "diskstats").read_text())
    assert disks["nvme0n1"][0] == 3822104  # reads completed
    assert disks["nvme0n1"][2] == 421020876  # sectors read
    assert len(disks["nvme1n1"]) == 17  # with discard and flush fields


def test_parse_mounts_unescapes_octal_spaces():
    mounts = parse_mounts((PROC / "1" / "mounts").read_text())
    by_point = {m.mountpoint: m for m in mounts}
    assert by_point["/media/cdrom drive"].fstype == "iso9660"
    assert by_point["/home"].device == "10.20.0.5:/export/home"
    assert by_point["/snap/core22/1380"].readonly


def test_parse_net_dev_splits_receive_and_transmit():
    devices = parse_net_dev((PROC / "net" / "dev").read_text())
    assert devices["eno1"]["receive_bytes"] == 9812039211022
    assert devices["eno1"]["receive_drop"] == 221
    assert devices["eno1"]["transmit_packets"] == 4022103221


def test_sys_exporter_golden_output():
    exporter = Exporter(
        "sys-exporter", sources(FIXTURE_ROOTS, statvfs=recorded_statvfs, machine="x86_64")
    )
    assert_golden("sys-exporter", scrape_text(exporter.registry))


def test_a_hung_nfs_mount_is_reported_without_stalling_the_scrape():
    release = threading.Event()
    calls: list[str] = []

    def statvfs(path: str) -> os.statvfs_result:
        calls.append(path)
        if path.endswith("/home"):
            release.wait(30)  # what a dead NFS server does to statvfs
        return recorded_statvfs(path)

    source = FilesystemSource(FIXTURE_ROOTS, statvfs=statvfs, mount_timeout=0.3)
    registry = Exporter("sys-exporter", [source], timeout=2).registry
    try:
        for _ in range(2):
            started = time.monotonic()
            labels = {"device": "10.20.0.5:/export/home", "fstype": "nfs4", "mountpoint": "/home"}
            assert registry.get_sample_value("node_filesystem_device_error", labels) == 1
            assert registry.get_sample_value("node_filesystem_size_bytes", labels) is None
            root = {"device": "/dev/mapper/vg0-root", "fstype": "ext4", "mountpoint": "/"}
            assert registry.get_sample_value("node_filesystem_size_bytes", root) == 483183820 * 4096
            assert time.monotonic() - started < 1.5
        assert sum(path.endswith("/home") for path in calls) == 1  # not asked again while stuck
    finally:
        release.set()


def test_sys_exporter_reads_this_machines_proc_and_sys():
    registry = Exporter("sys-exporter", sources(Roots())).registry
    cpus = os.cpu_count() or 1
    idle = [
        registry.get_sample_value("node_cpu_seconds_total", {"cpu": str(n), "mode": "idle"})
        for n in range(cpus)
    ]
    assert all(value is not None and value > 0 for value in idle)
    assert registry.get_sample_value("node_memory_MemTotal_bytes") > 0
    assert registry.get_sample_value("node_load1") is not None
    assert registry.get_sample_value("node_boot_time_seconds") < time.time()
    uname = {"sysname": "Linux", "release": platform.release(), "machine": platform.machine()}
    sample = next(s for m in registry.collect() if m.name == "node_uname" for s in m.samples)
    assert {k: sample.labels[k] for k in uname} == uname
    for collector in ("cpu", "stat", "meminfo", "loadavg", "netdev", "filesystem"):
        assert (
            registry.get_sample_value("mac_exporter_collector_success", {"collector": collector})
            == 1
        ), collector
