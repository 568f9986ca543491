"""Run one agent service: ``python -m exporters <service> [--port P] [--bind ADDR] ...``.

Also installed as the ``mac-exporter`` console script. Ports and names come from
``contract.services``; each service's builder is imported only when it runs, so
a service whose optional library is missing never stops the others from starting.
sys-exporter is the real node_exporter: this command writes MAC's textfile facts
and then replaces itself with node_exporter (exporters.node_exporter), so a
container's or supervisor's process is node_exporter itself.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
import threading

from contract.services import BY_NAME, SERVICES, SYS_EXPORTER
from exporters.runtime import DEFAULT_COLLECTOR_TIMEOUT, Exporter, Options, Roots, node_hostname
from exporters.server import PortInUseError, bind_socket, serve_asgi, serve_exporter

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
        description="Run one MAC agent service in the foreground.",
        epilog=f"services (name, default port, liveness path):\n{services}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("service", help="the service to run (see the list below)")
    ap.add_argument("--port", type=int, help="TCP port (default: the service's port)")
    ap.add_argument("--bind", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    ap.add_argument("--sys-root", default="/sys", help="where the host's /sys is (default /sys)")
    ap.add_argument("--proc-root", default="/proc", help="where the host's /proc is")
    ap.add_argument("--dev-root", default="/dev", help="where the host's /dev is")
    ap.add_argument(
        "--rootfs", default="/", help="the host's / for /etc, /opt and mount points (default /)"
    )
    ap.add_argument(
        "--collector-timeout",
        type=float,
        default=DEFAULT_COLLECTOR_TIMEOUT,
        help="seconds a scrape waits for each collector (default %(default)s)",
    )
    ap.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.service not in BY_NAME:
        ap.print_usage(sys.stderr)
        print(
            f"Error: unknown service {args.service!r}. Choose one of: {', '.join(BUILDERS)}.\n"
            "Run `mac-exporter --help` for the list with ports.",
            file=sys.stderr,
        )
        return 2
    port = args.port if args.port is not None else BY_NAME[args.service].port
    if not 0 <= port <= 65535:
        print(f"Error: --port {port} is not a TCP port (0-65535).", file=sys.stderr)
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
    if args.service == SYS_EXPORTER.name:
        return exec_node_exporter(args, port)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format=f"%(asctime)s {args.service} %(levelname)s %(message)s",
    )
    options = Options(
        roots=Roots(args.sys_root, args.proc_root, args.dev_root, args.rootfs),
        hostname=node_hostname(),
        timeout=args.collector_timeout,
    )
    try:
        sock = bind_socket(args.bind, port)
    except PortInUseError as exc:
        print(f"Error: {args.service}: {exc}", file=sys.stderr)
        return 1
    built = importlib.import_module(BUILDERS[args.service]).build(options)
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

    try:
        program = node_exporter.find_node_exporter(os.environ.get("MAC_NODE_EXPORTER"))
    except node_exporter.NodeExporterMissing as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    try:
        # node_exporter would only log "bind: address already in use"; say it MAC's way.
        bind_socket(args.bind, port).close()
    except PortInUseError as exc:
        print(f"Error: {args.service}: {exc}", file=sys.stderr)
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
        proc_root=args.proc_root,
        sys_root=args.sys_root,
        rootfs=args.rootfs,
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
