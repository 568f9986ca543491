"""Run agent services: ``python -m exporters <service> [--port P] [--bind ADDR] ...``.

Also installed as the ``mac-exporter`` console script. Ports and names come from
``contract.services``; each service's builder is imported only when it runs, so
a service whose optional library is missing never stops the others from starting.
sys-exporter is the real node_exporter: this command writes MAC's textfile facts
and then replaces itself with node_exporter (exporters.node_exporter), so a
container's or supervisor's process is node_exporter itself.

Several Python services may share one process, each on its own port:
``python -m exporters bmc-agent=29102 sys-manager=29103 ...`` (exporters.bundle; what
the process runtime runs). One service named alone runs exactly as before.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
import threading
import time
from pathlib import Path

from contract.services import BY_NAME, SERVICES, SYS_EXPORTER
from exporters.bundle import module_builder, run_bundle
from exporters.runtime import DEFAULT_COLLECTOR_TIMEOUT, Exporter, Options, node_hostname
from exporters.server import PortInUseError, bind_socket, serve_asgi, serve_exporter
from node.host import Roots

EXIT_JOIN_SECONDS = 1.0  # how long a stopping exporter waits for its threads to end

# service name -> module with build(options) returning an Exporter or an ASGI app;
# sys-exporter's module runs node_exporter instead (see exec_node_exporter).
BUILDERS: dict[str, str] = {
    "sys-exporter": "exporters.node_exporter",
    "bmc-agent": "exporters.bmc",
    "sys-manager": "exporters.sysmanager",
    "dcgm-exporter": "exporters.nvidia",
    "rocm-exporter": "exporters.amd",
    "sw-exporter": "exporters.sw",
    "nic-exporter": "exporters.nic",
    "mango-sdk-agent": "exporters.mango",
}


def parser() -> argparse.ArgumentParser:
    services = "\n".join(
        f"  {s.name:<16} :{s.port:<6} {s.liveness_path:<9} {s.description}" for s in SERVICES
    )
    ap = argparse.ArgumentParser(
        prog="mac-exporter",
        description=(
            "Run MAC agent services in the foreground: one, or several in one process "
            "(NAME=PORT each)."
        ),
        epilog=f"services (name, default port, liveness path):\n{services}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "service",
        nargs="+",
        help="the service to run (see the list below); several as NAME or NAME=PORT",
    )
    ap.add_argument("--port", type=int, help="TCP port of a single service (default: its own)")
    ap.add_argument("--bind", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    ap.add_argument("--sys-root", default="/sys", help="where the host's /sys is (default /sys)")
    ap.add_argument("--proc-root", default="/proc", help="where the host's /proc is")
    ap.add_argument("--dev-root", default="/dev", help="where the host's /dev is")
    ap.add_argument(
        "--rootfs", default="/", help="the host's / for /etc, /opt and mount points (default /)"
    )
    ap.add_argument(
        "--state-dir",
        type=Path,
        help="folder where the GPU exporters keep their GPUs' evidence across a restart on "
        "the same boot (default: nothing is kept; `mac start agent` gives its state folder)",
    )
    ap.add_argument(
        "--collector-timeout",
        type=float,
        default=DEFAULT_COLLECTOR_TIMEOUT,
        help="seconds a scrape waits for each collector (default %(default)s)",
    )
    ap.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    return ap


class UsageError(Exception):
    """A command line that names no valid set of services; the message says why."""


def requested(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(service, port) for each service named, or UsageError naming the item at fault."""
    wanted: list[tuple[str, int]] = []
    for item in args.service:
        name, sep, port_text = item.partition("=")
        if name not in BY_NAME:
            raise UsageError(
                f"unknown service {name!r}. Choose one of: {', '.join(BUILDERS)}.\n"
                "Run `mac-exporter --help` for the list with ports."
            )
        if sep:
            try:
                port = int(port_text)
            except ValueError:
                raise UsageError(f"{item!r}: the port after = is not a number.") from None
        elif args.port is not None and len(args.service) == 1:
            port = args.port
        else:
            port = BY_NAME[name].port
        if not 0 <= port <= 65535:
            where = f"{item!r}: port" if sep else "--port"
            raise UsageError(f"{where} {port} is not a TCP port (0-65535).")
        wanted.append((name, port))
    names = [name for name, _ in wanted]
    if len(wanted) > 1:
        if args.port is not None:
            raise UsageError("--port is for a single service; give several as NAME=PORT.")
        if SYS_EXPORTER.name in names:
            raise UsageError(
                "sys-exporter is node_exporter itself and runs alone: `mac-exporter sys-exporter`."
            )
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise UsageError(f"{', '.join(twice)} named twice.")
    return wanted


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    try:
        wanted = requested(args)
    except UsageError as exc:
        ap.print_usage(sys.stderr)
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    for flag, path in (
        ("--sys-root", args.sys_root),
        ("--proc-root", args.proc_root),
        ("--dev-root", args.dev_root),
        ("--rootfs", args.rootfs),
    ):
        if not os.path.isdir(path):
            print(
                f"Error: {flag} {path} is not a directory. Point it at the host's tree "
                "(inside a container: the bind-mounted host path).",
                file=sys.stderr,
            )
            return 2
    (service, port), *others = wanted
    if service == SYS_EXPORTER.name:
        return exec_node_exporter(args, port)
    label = service if not others else "exporters"
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        # In one process for several services, each line names its service itself.
        format=f"%(asctime)s {label} %(levelname)s %(message)s",
    )
    options = Options(
        roots=Roots(args.sys_root, args.proc_root, args.dev_root, args.rootfs),
        hostname=node_hostname(),
        timeout=args.collector_timeout,
        state_dir=args.state_dir,
    )
    if others:
        builders = {name: module_builder(BUILDERS[name]) for name, _ in wanted}
        code = run_bundle(wanted, args.bind, options, builders)
        leave_past_stuck_threads()
        return code
    try:
        sock = bind_socket(args.bind, port)
    except PortInUseError as exc:
        print(f"Error: {service}: {exc}", file=sys.stderr)
        return 1
    built = importlib.import_module(BUILDERS[service]).build(options)
    # Everything imported so far lives for the whole process: keep the cyclic GC from
    # rescanning it on every collection (shorter pauses, steadier scrape latency).
    gc.collect()
    gc.freeze()
    if isinstance(built, Exporter):
        serve_exporter(built, sock)
    else:
        serve_asgi(built, sock)
    leave_past_stuck_threads()
    return 0


def exec_node_exporter(args: argparse.Namespace, port: int) -> int:
    """Write MAC's textfile facts, then become node_exporter (returns only on failure)."""
    from exporters import node_exporter
    from node.host import NodeExporterMissing, find_node_exporter

    try:
        program = find_node_exporter(os.environ.get("MAC_NODE_EXPORTER"))
    except NodeExporterMissing as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    try:
        # node_exporter would only log "bind: address already in use"; say it MAC's way.
        bind_socket(args.bind, port).close()
    except PortInUseError as exc:
        print(f"Error: {SYS_EXPORTER.name}: {exc}", file=sys.stderr)
        return 1
    textfile_dir = node_exporter.default_textfile_dir(port)
    try:
        node_exporter.write_textfile(textfile_dir)
    except OSError as exc:
        print(
            f"Error: cannot write MAC's facts into {textfile_dir}: {exc}. "
            "Point MAC_TEXTFILE_DIR at a writable directory.",
            file=sys.stderr,
        )
        return 1
    argv = node_exporter.node_exporter_argv(
        program,
        bind=args.bind,
        port=port,
        textfile_dir=textfile_dir,
        roots=Roots(args.sys_root, args.proc_root, args.dev_root, args.rootfs),
        mount_timeout=args.collector_timeout,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, argv)  # noqa: S606 (node_exporter's own argv, no shell involved)
    return 1  # not reached: execv returns only by raising


def leave_past_stuck_threads() -> None:
    """Exit 0 now if a collector thread is still stuck (dead NFS mount, wedged device).

    Python joins pool threads at exit, and a thread blocked in the kernel never
    returns: without this a stopped exporter would hang until SIGKILL.
    """
    # Pool threads that were told to stop need a moment to see it; a stuck one never ends.
    deadline = time.monotonic() + EXIT_JOIN_SECONDS
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if stuck:
        logging.getLogger("exporters").warning(
            "leaving %d stuck collector thread(s) behind", len(stuck)
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
