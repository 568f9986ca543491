"""`python -m testkit.slurmlab`: a Slurm lab in the foreground, for demos (scripts/run).

    python -m testkit.slurmlab --root /tmp/mac-slurmlab --nodes gpu-1,gpu-2
    python -m testkit.slurmlab --root /tmp/mac-slurmlab --simulated-fleet 50 --base 127.100.0.0

With --simulated-fleet the NodeNames are the host names of the GPU nodes of the fleet
that `python -m testkit.simfleet --nodes N --base B --profiles` serves (at most
--max-nodes of them), so a master watching that fleet drains them in this lab. It prints
the SLURM_CONF to give the master, then READY, and stops every daemon on SIGTERM or
Ctrl-C. With --jobs N it keeps N jobs of the lab's users queued or running (1 to 8 GPUs, 2 to 10
minutes each, a new one when one ends), so the master's job pages have jobs to show.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import threading
from pathlib import Path

from testkit.simfleet.cli import fleet_layout
from testkit.simfleet.fleet import DEFAULT_BASE, hostname_for
from testkit.simfleet.profiles import DEFAULT_MIX
from testkit.slurmlab.host import LAB_USERS, SlurmLabError, SlurmLabUnavailable, ensure_users
from testkit.slurmlab.lab import SlurmLab
from testkit.slurmlab.processes import kill_marked

DEFAULT_MAX_NODES = 16
WORKLOAD_CHECK_SECONDS = 5.0


def top_up(lab: SlurmLab, count: int, rng: random.Random) -> list[int]:
    """Submit jobs until `count` of the lab's jobs are pending or running; their ids."""
    queued = len(lab.squeue("-h", "-t", "pending,running").splitlines())
    gpus = [n for n in (1, 2, 4, 8) if n <= len(lab.nodes[0].devices)] or [0]
    return [
        lab.submit(
            gpus=rng.choice(gpus),
            seconds=rng.randint(120, 600),
            user=rng.choice(LAB_USERS),
            name=rng.choice(("train", "finetune", "eval", "bench")),
        )
        for _ in range(max(0, count - queued))
    ]


def fleet_node_names(count: int, base: str, profiles: str, most: int) -> list[str]:
    """The host names of the fleet's GPU nodes, in the fleet's order, at most `most`."""
    names = [hostname_for(ip) for ip, profile in fleet_layout(count, base, profiles)
             if profile.gpu_count]  # fmt: skip
    return names[:most]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.slurmlab",
        description="Run a Slurm 22.05 lab (munge, slurmctld, one slurmd per node) in the "
        "foreground until SIGTERM or Ctrl-C. Needs root and Debian's Slurm (scripts/bootstrap).",
    )
    parser.add_argument("--root", required=True, type=Path, help="the lab's folder (short)")
    names = parser.add_mutually_exclusive_group(required=True)
    names.add_argument("--nodes", help="NodeNames, comma-separated")
    names.add_argument(
        "--simulated-fleet", type=int, metavar="N",
        help="the GPU nodes of a simulated fleet of N nodes (python -m testkit.simfleet)",
    )  # fmt: skip
    parser.add_argument("--base", default=DEFAULT_BASE, help="the simulated fleet's --base")
    parser.add_argument(
        "--profiles", default=DEFAULT_MIX, help="the simulated fleet's --profiles mix"
    )
    parser.add_argument(
        "--max-nodes", type=int, default=DEFAULT_MAX_NODES,
        help=f"at most this many of the fleet's nodes (default {DEFAULT_MAX_NODES})",
    )  # fmt: skip
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument(
        "--jobs", type=int, default=0, metavar="N",
        help="keep N jobs of the lab's users queued or running, for the job pages",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.nodes:
        nodes = [name.strip() for name in args.nodes.split(",") if name.strip()]
    else:
        if args.simulated_fleet < 1 or args.max_nodes < 1:
            parser.error("--simulated-fleet and --max-nodes must be at least 1")
        try:
            nodes = fleet_node_names(args.simulated_fleet, args.base, args.profiles, args.max_nodes)
        except ValueError as exc:
            parser.error(str(exc))
        if not nodes:
            parser.error(f"the simulated fleet of {args.simulated_fleet} has no GPU node")
    root = args.root.resolve()
    kill_marked(str(root))  # daemons a killed run left behind
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        lab = SlurmLab.start(root, nodes, args.gpus)
    except (SlurmLabUnavailable, SlurmLabError, ValueError) as exc:
        print(f"Error: the Slurm lab cannot start: {exc}", file=sys.stderr)
        return 1
    try:
        shown = ", ".join(nodes[:4]) + (f" ... ({len(nodes)} nodes)" if len(nodes) > 4 else "")
        print(f"Slurm lab: {shown}, {args.gpus} GPUs each, partition {lab.partition}", flush=True)
        print(f"SLURM_CONF={lab.conf}", flush=True)
        print(f"Try: SLURM_CONF={lab.conf} sinfo -N -l", flush=True)
        print("READY", flush=True)
        if args.jobs > 0:
            ensure_users()
            rng = random.Random()
            while not stop.is_set():
                try:
                    top_up(lab, args.jobs, rng)
                except SlurmLabError as exc:
                    print(f"could not submit a demo job: {exc}", file=sys.stderr, flush=True)
                stop.wait(WORKLOAD_CHECK_SECONDS)
        stop.wait()
    finally:
        lab.stop()
        print("Slurm lab stopped.", flush=True)
    return 0
