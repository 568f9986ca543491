"""sys-exporter is the real node_exporter: how MAC runs it on 29101.

A Python copy of node_exporter can only lag the original (fewer collectors, slower,
bigger), so on every agent `mac` runs Debian's ``prometheus-node-exporter`` (MAC's
image installs the same package). This module is the one place that knows how:

* the command line (``node_exporter_argv``): MAC's listen address and port rules,
  the host's /proc, /sys and / when they are bind-mounted elsewhere, the collectors
  the community dashboards read that are off by default (``processes``,
  ``interrupts``, ``tcpstat``) and ``systemd`` only where it can answer, the
  netstat fields Node Exporter Full plots, and the hung-mount guard
  (``--collector.filesystem.mount-timeout``; a hidden flag already in 1.5);
* MAC's own facts beside node_exporter's (``write_textfile``): written atomically
  into the textfile collector's directory, so node_exporter serves them under its
  own scrape and ``node_textfile_scrape_error`` says if one is unreadable;
* the check `mac start agent` runs first: the program is there (node.host finds it).

node_exporter's infiniband collector stays off: nic-exporter serves the same
``node_infiniband_*`` families (from the same sysfs files) on the host network,
where they survive ``ip_forward=0``, and one source per series keeps alert rules
from firing twice.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from contract.atomicfile import write_atomically
from contract.services import SYS_EXPORTER
from exporters.runtime import BuildInfoSource
from node.host import NodeExporterMissing, Roots, find_node_exporter

TEXTFILE_NAME = "mac.prom"
DEFAULT_MOUNT_TIMEOUT = 5.0

# Off by default in node_exporter, read by Node Exporter Full (1860), cheap on any Linux.
ALWAYS_ON = ("processes", "interrupts", "tcpstat")
# node_exporter 1.5's default netstat fields plus those Node Exporter Full plots
# (TCP out-of-order queue, receive-queue drops, MaxConn); newer releases added the
# first two to their default.
NETSTAT_FIELDS = (
    "^(.*_(InErrors|InErrs)|Ip_Forwarding|Ip(6|Ext)_(InOctets|OutOctets)|Icmp6?_(InMsgs|OutMsgs)"
    "|TcpExt_(Listen.*|Syncookies.*|TCPSynRetrans|TCPTimeouts|TCPOFOQueue|TCPRcvQDrop)"
    "|Tcp_(ActiveOpens|InSegs|OutSegs|OutRsts|PassiveOpens|RetransSegs|CurrEstab|MaxConn)"
    "|Udp6?_(InDatagrams|OutDatagrams|NoPorts|RcvbufErrors|SndbufErrors))$"
)


def listen_address(bind: str, port: int) -> str:
    """``--web.listen-address``: an empty or wildcard bind listens everywhere, like MAC's."""
    if bind in ("", "0.0.0.0"):
        return f":{port}"
    if ":" in bind:
        return f"[{bind.strip('[]')}]:{port}"
    return f"{bind}:{port}"


# What the systemd collector dials, in node_exporter's own view of /run (as root it
# talks to systemd's private socket, else to the system bus).
SYSTEMD_SOCKETS = ("/run/systemd/private", "/run/dbus/system_bus_socket")


def host_runs_systemd(
    roots: Roots | None = None, sockets: tuple[str, ...] = SYSTEMD_SOCKETS
) -> bool:
    """Whether the systemd collector can answer: systemd is PID 1 and its socket is here.

    Without both it would fail on every scrape (and log it), as in a container
    without /run/systemd mounted.
    """
    booted = (roots or Roots()).host("/run/systemd/system").is_dir()  # sd_booted()
    return booted and any(Path(socket).exists() for socket in sockets)


def node_exporter_argv(
    program: str,
    *,
    bind: str = "0.0.0.0",
    port: int = SYS_EXPORTER.port,
    textfile_dir: str | Path,
    roots: Roots | None = None,
    mount_timeout: float = DEFAULT_MOUNT_TIMEOUT,
    systemd: bool | None = None,
) -> list[str]:
    """node_exporter's command line for sys-exporter on this host."""
    roots = roots or Roots()
    if systemd is None:
        systemd = host_runs_systemd(roots)
    return [
        program,
        f"--web.listen-address={listen_address(bind, port)}",
        f"--path.procfs={roots.proc_root}",
        f"--path.sysfs={roots.sys_root}",
        f"--path.rootfs={roots.rootfs}",
        *(f"--collector.{name}" for name in ALWAYS_ON),
        # Debian's build turns systemd on by default: say it either way.
        "--collector.systemd" if systemd else "--no-collector.systemd",
        "--no-collector.infiniband",
        f"--collector.netstat.fields={NETSTAT_FIELDS}",
        f"--collector.filesystem.mount-timeout={mount_timeout:g}s",
        f"--collector.textfile.directory={textfile_dir}",
    ]


def textfile_content() -> bytes:
    """MAC's facts in the exposition format: the same build_info every MAC exporter serves."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BuildInfoSource(SYS_EXPORTER.name))
    return generate_latest(registry)


def write_textfile(directory: str | Path) -> Path:
    """Write MAC's facts for node_exporter's textfile collector; returns the file."""
    path = Path(directory) / TEXTFILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, textfile_content())
    return path


def default_textfile_dir(port: int) -> Path:
    """MAC_TEXTFILE_DIR, else a per-port folder in the temporary directory."""
    explicit = os.environ.get("MAC_TEXTFILE_DIR")
    return Path(explicit) if explicit else Path(tempfile.gettempdir(), f"mac-sys-exporter-{port}")


def main(argv: list[str] | None = None) -> int:
    """``python -m exporters.node_exporter --textfile-dir DIR``: check and write the facts.

    The process runtime runs this before it starts node_exporter, so a missing
    program fails `mac start agent` with the command that installs it.
    """
    ap = argparse.ArgumentParser(prog="python -m exporters.node_exporter")
    ap.add_argument("--textfile-dir", required=True, help="node_exporter's textfile directory")
    args = ap.parse_args(argv)
    try:
        find_node_exporter(os.environ.get("MAC_NODE_EXPORTER"))
    except NodeExporterMissing as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    try:
        write_textfile(args.textfile_dir)
    except OSError as exc:
        print(
            f"Error: cannot write MAC's facts into {args.textfile_dir}: {exc}. "
            "Point MAC_TEXTFILE_DIR at a writable directory.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
