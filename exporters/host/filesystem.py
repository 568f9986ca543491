"""Filesystem sizes per mount point (node_exporter's filesystem collector).

``statvfs`` on a dead NFS server blocks in the kernel, uninterruptibly, for as
long as the server is gone. Each call therefore runs in a worker thread with its
own short deadline; a mount whose call has not returned is reported with
``node_filesystem_device_error 1`` and is not asked again until that call comes
back, so a hung mount costs one thread, never the scrape.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from exporters.runtime import Roots, read_text

log = logging.getLogger("exporters")

# node_exporter's defaults: pseudo and container-internal filesystems are noise.
IGNORED_FSTYPES = re.compile(
    r"^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|"
    r"iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|"
    r"erofs|sysfs|tracefs)$"
)
IGNORED_MOUNTPOINTS = re.compile(
    r"^/(dev|proc|run/credentials/.+|sys|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)"
)
DEFAULT_MOUNT_TIMEOUT = 1.0


@dataclass(frozen=True)
class Mount:
    device: str
    mountpoint: str
    fstype: str
    options: tuple[str, ...]

    @property
    def readonly(self) -> bool:
        return "ro" in self.options


def _unescape(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal (\040...).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> list[Mount]:
    """Parse /proc/mounts (or /proc/1/mounts) lines."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mounts.append(
            Mount(
                device=_unescape(parts[0]),
                mountpoint=_unescape(parts[1]),
                fstype=parts[2],
                options=tuple(parts[3].split(",")),
            )
        )
    return mounts


class FilesystemSource:
    """node_filesystem_{size,free,avail}_bytes, files, files_free, readonly, device_error."""

    name = "filesystem"
    # Only statvfs can block here, and it already runs in this source's own pool under
    # mount_timeout; the runtime needs no second thread hand-off on top.
    inline = True

    def __init__(
        self,
        roots: Roots,
        statvfs: Callable[[str], os.statvfs_result] | None = None,
        mount_timeout: float = DEFAULT_MOUNT_TIMEOUT,
    ):
        self.roots = roots
        self.statvfs = statvfs or os.statvfs
        self.mount_timeout = mount_timeout
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="statvfs"
        )
        self._stuck: dict[str, concurrent.futures.Future] = {}
        self._lock = threading.Lock()

    def mounts(self) -> list[Mount]:
        # PID 1's view: inside a container, the host's mounts when /proc is the host's.
        text = read_text(self.roots.proc("1", "mounts")) or read_text(self.roots.proc("mounts"))
        if text is None:
            raise FileNotFoundError(f"neither {self.roots.proc('1', 'mounts')} nor mounts")
        seen: set[str] = set()
        wanted = []
        for mount in parse_mounts(text):
            if IGNORED_FSTYPES.match(mount.fstype) or IGNORED_MOUNTPOINTS.match(mount.mountpoint):
                continue
            if mount.mountpoint in seen:  # over-mounted: keep the first, like node_exporter
                continue
            seen.add(mount.mountpoint)
            wanted.append(mount)
        return wanted

    def _stat(self, mount: Mount) -> concurrent.futures.Future | None:
        with self._lock:
            stuck = self._stuck.get(mount.mountpoint)
            if stuck is not None:
                if not stuck.done():
                    return None
                del self._stuck[mount.mountpoint]
            return self._pool.submit(self.statvfs, str(self.roots.host(mount.mountpoint)))

    def collect(self) -> Iterable[Metric]:
        labels = ["device", "fstype", "mountpoint"]
        families = {
            key: GaugeMetricFamily(f"node_filesystem_{key}", doc, labels=labels)
            for key, doc in (
                ("size_bytes", "Filesystem size in bytes."),
                ("free_bytes", "Filesystem free space in bytes."),
                ("avail_bytes", "Filesystem space available to non-root users in bytes."),
                ("files", "Filesystem total file nodes."),
                ("files_free", "Filesystem total free file nodes."),
                ("readonly", "Filesystem read-only status."),
                (
                    "device_error",
                    "Whether an error occurred while getting statistics for the "
                    "given device (a hung mount counts).",
                ),
            )
        }
        mounts = self.mounts()
        futures = [(mount, self._stat(mount)) for mount in mounts]
        # One shared deadline for all mounts: several hung mounts cost one timeout, not many.
        concurrent.futures.wait([f for _, f in futures if f is not None], self.mount_timeout)
        for mount, future in futures:
            values = [mount.device, mount.fstype, mount.mountpoint]
            result = None
            if future is not None and not future.done():
                with self._lock:
                    self._stuck[mount.mountpoint] = future
                log.warning(
                    "statvfs(%s) did not return in %ss: mount hung?",
                    mount.mountpoint,
                    self.mount_timeout,
                )
            elif future is not None:
                try:
                    result = future.result()
                except OSError as exc:
                    log.debug("statvfs(%s) failed: %s", mount.mountpoint, exc)
            families["device_error"].add_metric(values, 0.0 if result else 1.0)
            families["readonly"].add_metric(values, 1.0 if mount.readonly else 0.0)
            if result is None:
                continue
            families["size_bytes"].add_metric(values, result.f_blocks * result.f_frsize)
            families["free_bytes"].add_metric(values, result.f_bfree * result.f_frsize)
            families["avail_bytes"].add_metric(values, result.f_bavail * result.f_frsize)
            families["files"].add_metric(values, result.f_files)
            families["files_free"].add_metric(values, result.f_ffree)
        yield from families.values()
