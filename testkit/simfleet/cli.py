"""`python -m testkit.simfleet`: serve a fleet from the shell, and register it with a master."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import threading

from contract.liveness import loop_factory, raise_nofile_limit
from contract.master_api import registration_body
from contract.services import SYS_EXPORTER
from node.gpu.health import DEFAULT_WINDOW
from testkit.ports import ContractPortHeld
from testkit.simfleet import control
from testkit.simfleet.fleet import (
    DEFAULT_BASE,
    DEFAULT_SERVICES,
    Mode,
    SimFleet,
    SimNode,
    node_addresses,
)
from testkit.simfleet.profiles import (
    DEFAULT_MIX,
    FAULT_RATE,
    PROFILES,
    Profile,
    assign,
    parse_mix,
)

# Every profile runs these, so faults of --fault-service may target them.
SERVICES_OF_PROFILES = ("sys-exporter", "sys-manager")


def pick(count: int, fraction: float, offset: float = 0.0) -> set[int]:
    """floor(count * fraction) node indexes spread evenly over the fleet."""
    if fraction <= 0:
        return set()
    step = 1 / fraction
    return {int(k * step + offset * step) % count for k in range(int(count * fraction))}


async def register_fleet(
    fleet: SimFleet, master: str, token: str = "", concurrency: int = 20
) -> tuple[int, list[str]]:
    """POST /api/v1/register for every node, from its own loopback address.

    Each request leaves from the node's address, as a real agent's does, so the
    master records that address and a re-run re-registers the same rows without
    node keys. The join token is sent when given; 429 answers are retried after
    their Retry-After.
    """
    import aiohttp

    url = master.rstrip("/") + "/api/v1/register"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    semaphore = asyncio.Semaphore(concurrency)
    errors: list[str] = []
    registered = 0

    async def one(node: SimNode) -> None:
        nonlocal registered
        body = registration_body(
            node.hostname,
            node.ip,
            node.exporters(),
            agent_version="simfleet",
            machine_id=hashlib.sha256(node.ip.encode()).hexdigest()[:32],
            labels={"simulated": "true"},
            **node.registration(),
        )
        async with (
            semaphore,
            aiohttp.ClientSession(
                timeout=timeout, connector=aiohttp.TCPConnector(local_addr=(node.ip, 0))
            ) as session,
        ):
            for _attempt in range(20):
                async with session.post(url, json=body, headers=headers) as response:
                    if response.status == 429:
                        await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                        continue
                    if response.status in (200, 201):
                        registered += 1
                    else:
                        errors.append(
                            f"{node.hostname}: HTTP {response.status} {await response.text()}"
                        )
                    return
            errors.append(f"{node.hostname}: still rate-limited after 20 tries")

    timeout = aiohttp.ClientTimeout(total=30)
    await asyncio.gather(*(one(node) for node in fleet.nodes))
    return registered, errors


async def _serve(args: argparse.Namespace) -> int:
    fleet = SimFleet(
        args.nodes,
        base=args.base,
        ips=args.ip or None,
        services=args.services.split(","),
        profiles=args.profiles,
        seed=args.seed,
        fault_rate=args.fault_rate,
        evidence_window=args.evidence_window,
        control_dir=control.control_dir(args.state_dir) if args.profiles else None,
        collect_interval=args.collect_interval,
    )
    needed = sum(len(node.ports) for node in fleet.nodes) + 100
    limit = raise_nofile_limit()
    if needed > limit:
        print(
            f"Error: {len(fleet.nodes)} nodes need about {needed} open files, "
            f"the limit is {limit}. "
            "Split the fleet across processes with different --base and fewer --nodes.",
            file=sys.stderr,
        )
        return 2
    await fleet.start()
    count = len(fleet.nodes)
    faults = [(Mode.BLACKHOLE, args.blackhole, 0.0), (Mode.HANG, args.hang, 1 / 3)]
    faults.append((Mode.REFUSE, args.refuse, 2 / 3))
    for mode, fraction, offset in faults:
        for index in pick(count, fraction, offset):
            if args.fault_service == "all":
                await fleet.set_node_mode(index, mode)
            else:
                await fleet.set_mode(index, args.fault_service, mode)
    first, last = fleet.nodes[0].ip, fleet.nodes[-1].ip
    what = f"profiles {args.profiles}, seed {args.seed}" if args.profiles else args.services
    print(f"serving {count} simulated nodes on {first} .. {last} ({what})", flush=True)
    if fleet.control is not None:
        print(
            f"faults on demand: python -m testkit.simfleet inject {fleet.nodes[0].hostname} "
            "xid=79 gpu=3 (heal, reboot, nodes; control file in "
            f"{fleet.control.folder})",
            flush=True,
        )
    if args.register:
        done, errors = await register_fleet(fleet, args.register, args.token)
        print(f"registered {done} of {count} nodes with {args.register}", flush=True)
        for error in errors[:10]:
            print(f"  {error}", file=sys.stderr)
        if errors and not done:
            print(
                "Error: no node could register; check the master URL and --token (MAC_JOIN_TOKEN).",
                file=sys.stderr,
            )
            await fleet.stop()
            return 1
    print("READY", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fleet.stop()
    return 0


def _ports_per_node(args: argparse.Namespace) -> int:
    """The most listening sockets one node of this fleet needs."""
    if args.profiles:
        return max(len(PROFILES[name].services) for name in parse_mix(args.profiles))
    return len(args.services.split(","))


def slices(count: int, base: str, per_node: int) -> list[tuple[str, int]]:
    """(--base, --nodes) of each process, so that none needs more sockets than it may open."""
    limit = raise_nofile_limit()
    if count * per_node + 100 <= limit:
        return [(base, count)]
    per_process = max(1, (limit - 200) // per_node)
    addresses = node_addresses(count, base)
    return [
        (base if start == 0 else addresses[start - 1], min(per_process, count - start))
        for start in range(0, count, per_process)
    ]


def fleet_layout(count: int, base: str, profiles: str) -> list[tuple[str, Profile]]:
    """Each node's address and profile, as `--nodes count --base base --profiles` serves them."""
    mix = parse_mix(profiles)
    per_node = max(len(PROFILES[name].services) for name in mix)
    layout = []
    for start, size in slices(count, base, per_node):
        layout.extend(zip(node_addresses(size, start), assign(size, mix), strict=True))
    return layout


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in options)):
            kept.append(arg)
    return kept


def _serve_in_processes(parts: list[tuple[str, int]], argv: list[str]) -> int:
    """One child per slice (each under the open-files limit), READY when all are."""
    rest = _without(argv, ("--nodes", "--base"))
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testkit.simfleet",
                *rest,
                "--nodes",
                str(count),
                "--base",
                base,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for base, count in parts
    ]
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        for child in children:
            assert child.stdout is not None
            for line in child.stdout:
                if line.strip() == "READY":
                    break
                print(line, end="", flush=True)
            else:
                print(f"Error: a fleet process exited with {child.wait()}", file=sys.stderr)
                return 1
        total = sum(count for _, count in parts)
        print(f"serving {total} simulated nodes in {len(children)} processes", flush=True)
        print("READY", flush=True)
        while not stop.is_set() and all(child.poll() is None for child in children):
            stop.wait(1)
        return 0 if stop.is_set() else 1
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            child.wait(30)


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in control.COMMANDS:
        return control.main(words)
    parser = argparse.ArgumentParser(
        prog="python -m testkit.simfleet",
        description="Serve N fake MAC agents on loopback addresses (and optionally register "
        "them). Act on a running fleet with: inject HOST FAULT [gpu=N], heal HOST, "
        "reboot HOST, nodes (python -m testkit.simfleet inject --help).",
    )
    parser.add_argument("--nodes", type=int, default=10, help="number of fake nodes")
    parser.add_argument("--base", default=DEFAULT_BASE, help="addresses start after this one")
    parser.add_argument("--ip", action="append", help="explicit address (repeatable)")
    parser.add_argument(
        "--profiles",
        nargs="?",
        const=DEFAULT_MIX,
        metavar="NAME=WEIGHT,...",
        help="nodes with hardware, in this mix of profiles: "
        + "; ".join(f"{p.name} ({p.description})" for p in PROFILES.values())
        + f". Without a value: {DEFAULT_MIX}. Without the option: plain nodes on --services",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated values")
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=FAULT_RATE,
        help="each profiled node's chance of a GPU or RDMA fault per 10 minutes "
        f"(default {FAULT_RATE}; 0 for none)",
    )
    parser.add_argument(
        "--evidence-window",
        type=float,
        default=float(os.environ.get("MAC_GPU_EVIDENCE_WINDOW") or DEFAULT_WINDOW),
        help="seconds a GPU event (an XID, an ECC error) counts in the simulated GPUs' "
        "verdicts, as MAC_GPU_EVIDENCE_WINDOW on an agent (default %(default)g)",
    )
    parser.add_argument(
        "--collect-interval",
        type=float,
        default=0.0,
        help="with --profiles: render each exporter page at most once per this many seconds "
        "and gzip it once when asked, as a real exporter's collection does (the benchmarks "
        "use the scrape interval); default 0, a fresh page at every scrape",
    )
    parser.add_argument(
        "--state-dir",
        help="with --profiles: the control file for `inject`, `heal`, `reboot` goes under "
        "<this>/simfleet (default: MAC_STATE_DIR, else the node's state folder)",
    )
    parser.add_argument(
        "--services",
        default=",".join(DEFAULT_SERVICES),
        help="comma-separated services each plain node serves (names from contract.services)",
    )
    parser.add_argument("--blackhole", type=float, default=0.0, help="fraction black-holed")
    parser.add_argument("--hang", type=float, default=0.0, help="fraction that hang")
    parser.add_argument("--refuse", type=float, default=0.0, help="fraction of nodes refusing")
    parser.add_argument(
        "--fault-service",
        default=SYS_EXPORTER.name,
        help="the service whose port fails, or 'all' for every port of the node",
    )
    parser.add_argument(
        "--register", metavar="URL", help="master to register with, e.g. http://m:28080"
    )
    parser.add_argument("--token", default="", help="the master's join token (MAC_JOIN_TOKEN)")
    args = parser.parse_args(argv)
    if not 0 <= args.fault_rate <= 1:
        parser.error(f"--fault-rate {args.fault_rate} is not between 0 and 1")
    if args.profiles:
        try:
            parse_mix(args.profiles)
        except ValueError as exc:
            parser.error(str(exc))
    faulty = args.blackhole or args.hang or args.refuse
    served = SERVICES_OF_PROFILES if args.profiles else args.services.split(",")
    if faulty and args.fault_service not in ("all", *served):
        parser.error(f"--fault-service {args.fault_service!r} is not a service the nodes serve")
    if args.nodes < 1 and not args.ip:
        parser.error("--nodes must be at least 1")
    try:
        parts = [] if args.ip else slices(args.nodes, args.base, _ports_per_node(args))
    except ValueError as exc:
        parser.error(str(exc))
    if len(parts) > 1:
        return _serve_in_processes(parts, sys.argv[1:] if argv is None else argv)
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return runner.run(_serve(args))
    except ValueError as exc:
        parser.error(str(exc))
    except ContractPortHeld as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"Error: cannot listen: {exc}. Is another fleet using these addresses?", file=sys.stderr
        )
        return 1
    return 0
