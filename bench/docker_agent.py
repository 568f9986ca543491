"""Benchmark: from `mac start agent` to the node Online under Docker, and the agent's memory.

A real Docker engine (testkit.docker_engine: Debian's dockerd in a network namespace of
its own, the node at 198.18.250.2) and a real master on the host side of the veth
(`mac start master --runtime process` on 198.18.250.1, probing every second so that
the sweep adds at most a second). Each run times `mac start agent` on the node, and
then how long until the master says Online (GET /api/v1/self with the node's key):

- cold: MAC's image removed first (`docker rmi`), so `mac start agent` builds it on
  the Debian base (scripts/docker-base, from its cache) with the host's wheelhouse;
- warm: the image is there, the containers are not (`mac stop agent` removed them);
- baseline, in the same run: the same services under the process runtime, on the same
  node and master.

Memory, once the node is Online and a few scrapes have passed: the agent containers'
cgroup memory as `docker stats` shows it, and the resident memory (RSS) of their
processes and of their containerd shims, beside the RSS of the process runtime's
services. Results go to docs/benchmarks.md (section docker-agent).

    sudo .venv/bin/python -m bench.docker_agent [--cold 2] [--warm 3] [--no-write]

Needs root, Debian's docker.io and docker-compose, debootstrap (or its cached base in
MAC_DOCKER_CACHE) and Redis (BENCH_REDIS_URL, default redis://127.0.0.1:6379/4).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.report import median, update_section
from contract.master_api import MasterClient
from contract.services import SERVICES
from maccli.runtimes.dockerimage import default_wheelhouse
from node.config import NodeConfig
from testkit.docker_engine import HOST_IP, NS_IP, DockerEngine, why_unavailable
from testkit.macenv import scratch_mac_env

ROOT = Path(__file__).resolve().parent.parent
# What the Docker agent runs on a node without GPUs; the baseline runs the same set.
AGENT = sorted({s.name for s in SERVICES} - {"dcgm-exporter", "rocm-exporter"})
INTERVAL = "1"  # MAC_PROBE_INTERVAL of the master: the sweep adds at most this
SETTLE_S = 5.0  # after Online, before measuring memory: a few scrapes and health checks
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 1e3, "MB": 1e6, "GB": 1e9}


@dataclass
class Run:
    kind: str  # cold | warm | process
    start_s: float  # `mac start agent` until it returned (registered)
    online_s: float  # `mac start agent` until the master said Online
    cgroup_mib: float = float("nan")  # docker stats (containers only)
    rss_mib: float = float("nan")  # the services' processes
    shim_mib: float = float("nan")  # containerd-shim per container (Docker only)
    per_service: dict[str, float] = field(default_factory=dict)  # RSS, MiB
    per_cgroup: dict[str, float] = field(default_factory=dict)  # docker stats, MiB
    shared: bool = False  # several services in one process (the process runtime's bundle)


def _mac(
    env: dict[str, str], *args: str, node: DockerEngine | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """`mac ARGS`, on the node (inside the engine's namespace) when `node` is given."""
    argv = [sys.executable, "-m", "maccli.main", *args]
    if node is not None:
        argv = node.ns_command(*argv)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
    if check and done.returncode != 0:
        output = done.stdout[-2000:] + done.stderr[-3000:]
        raise RuntimeError(f"mac {' '.join(args)} failed:\n{output}")
    return done


def _environment(root: Path, **extra: str) -> dict[str, str]:
    return scratch_mac_env(root, **extra)


def _online(env: dict[str, str], deadline: float) -> None:
    cfg = NodeConfig.load(env)
    client = MasterClient(f"http://{HOST_IP}:28080", node_key=cfg.node_key, timeout=2)
    while time.monotonic() < deadline:
        reply = client.self_info()
        if reply.ok and isinstance(reply.body, dict) and reply.body.get("status") == "online":
            return
        time.sleep(0.1)
    raise RuntimeError("the node did not become Online in time")


def _to_online(env: dict[str, str], engine: DockerEngine, runtime: str) -> tuple[float, float]:
    began = time.monotonic()
    _mac(env, "start", "agent", "--runtime", runtime, node=engine)
    returned = time.monotonic()
    _online(env, returned + 120)
    return returned - began, time.monotonic() - began


def _bytes(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)\s*([A-Za-z]+)", text.strip())
    if not match:
        raise ValueError(f"unexpected docker stats size {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _rss(pid: int) -> float:
    """RSS of a process and its children, in bytes."""
    try:
        process = psutil.Process(pid)
        family = [process, *process.children(recursive=True)]
        return float(sum(p.memory_info().rss for p in family))
    except psutil.NoSuchProcess:
        return 0.0


def _docker_memory(engine: DockerEngine, run: Run) -> None:
    names = [f"mac-{name}" for name in AGENT]
    stats = engine.docker(
        "stats", "--no-stream", "--format", "{{.Name}}\t{{.MemUsage}}", *names, timeout=60
    )
    cgroup = {}
    for line in stats.stdout.splitlines():
        name, usage = line.split("\t")
        cgroup[name] = _bytes(usage.split("/")[0])
    inspected = json.loads(engine.docker("inspect", *names).stdout)
    shim = 0.0
    for row in inspected:
        pid = row["State"]["Pid"]
        run.per_service[row["Name"].lstrip("/")[4:]] = _rss(pid) / 2**20
        parent = psutil.Process(pid).parent()
        shim += parent.memory_info().rss if parent else 0.0
    run.cgroup_mib = sum(cgroup.values()) / 2**20
    run.rss_mib, run.shim_mib = sum(run.per_service.values()), shim / 2**20
    run.per_cgroup = {name[4:]: value / 2**20 for name, value in cgroup.items()}


def _process_memory(env: dict[str, str], engine: DockerEngine, run: Run) -> None:
    status = _mac(env, "status", "--json", "--runtime", "process", node=engine, check=False)
    services = json.loads(status.stdout)["services"]
    run.per_service = {s["name"]: _rss(s["pid"]) / 2**20 for s in services if s.get("pid")}
    # The Python exporters share one process under the process runtime (MAC_AGENT_BUNDLE):
    # count each process once.
    pids = {s["pid"] for s in services if s.get("pid")}
    run.rss_mib = sum(_rss(pid) for pid in pids) / 2**20
    run.shared = len(pids) < len(run.per_service)


def _remove_image(engine: DockerEngine) -> None:
    engine.docker("rmi", "-f", os.environ.get("MAC_IMAGE") or "mac:latest")
    engine.docker("image", "prune", "-f")  # the build's intermediate layers: a true cold build


def measure(cold: int, warm: int) -> tuple[list[Run], str]:
    engine = DockerEngine(tag=f"b{os.getpid() % 100000}").start()
    root = Path(tempfile.mkdtemp(prefix="mac-bench-docker-"))
    master_env = _environment(
        root / "master",
        MAC_DATA_DIR=str(root / "master" / "data"),
        MAC_MASTER_BIND=HOST_IP,
        MAC_REDIS_URL=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/4"),
        MAC_PROBE_INTERVAL=INTERVAL,
        MAC_PROBE_TIMEOUT="1",
        MAC_RUNTIME="process",
    )
    node_env = _environment(
        root / "node",
        DOCKER_HOST=engine.host,
        MASTER_IP=HOST_IP,
        MAC_AGENT_IP=NS_IP,
        NODE_NAME=f"bench-docker-{os.getpid()}",
        MAC_AGENT_SERVICES=",".join(AGENT),
        # The host's wheelhouse (HOME is the node's own): a cold build downloads nothing.
        MAC_WHEELHOUSE=str(default_wheelhouse()),
    )
    runs: list[Run] = []
    try:
        base = subprocess.run(
            [str(ROOT / "scripts/docker-base")],
            env=engine.env(), capture_output=True, text=True, check=False,
        )  # fmt: skip
        if base.returncode != 0:
            raise RuntimeError(f"scripts/docker-base failed: {base.stderr[-2000:]}")
        storage = engine.docker("info", "--format", "{{.Driver}}").stdout.strip()
        _mac(master_env, "start", "master")
        plan = ["cold"] * cold + ["warm"] * warm + ["process"] * max(warm, 1)
        for kind in plan:
            if kind == "cold":
                _remove_image(engine)
            runtime = "process" if kind == "process" else "docker"
            start_s, online_s = _to_online(node_env, engine, runtime)
            run = Run(kind, start_s, online_s)
            time.sleep(SETTLE_S)
            if runtime == "docker":
                _docker_memory(engine, run)
            else:
                _process_memory(node_env, engine, run)
            runs.append(run)
            print(
                f"{kind:8} start {start_s:6.1f} s  Online {online_s:6.1f} s  "
                f"cgroup {run.cgroup_mib:6.1f} MiB  RSS {run.rss_mib:6.1f} MiB",
                flush=True,
            )
            _mac(node_env, "stop", "agent", "--runtime", runtime, node=engine)
    finally:
        subprocess.run(
            [sys.executable, "-m", "maccli.main", "stop", "master"],
            env=master_env, capture_output=True, timeout=300,
        )  # fmt: skip
        engine.stop()
    return runs, storage


def _median(runs: list[Run], kind: str, attr: str) -> float:
    return median([getattr(r, attr) for r in runs if r.kind == kind])


def report(runs: list[Run], storage: str) -> str:
    counts = {kind: sum(r.kind == kind for r in runs) for kind in ("cold", "warm", "process")}
    rows = []
    labels = {
        "cold": "Docker, cold (image built by `mac start agent`)",
        "warm": "Docker, warm (image present)",
        "process": "process runtime (baseline)",
    }
    for kind, label in labels.items():
        if not counts[kind]:
            continue
        cgroup = _median(runs, kind, "cgroup_mib")
        shim = _median(runs, kind, "shim_mib")
        rows.append(
            f"| {label} | {counts[kind]} | {_median(runs, kind, 'start_s'):.1f} s | "
            f"{_median(runs, kind, 'online_s'):.1f} s | "
            f"{'-' if cgroup != cgroup else f'{cgroup:.0f} MiB'} | "
            f"{_median(runs, kind, 'rss_mib'):.0f} MiB | "
            f"{'-' if shim != shim else f'{shim:.0f} MiB'} |"
        )
    warm = [r for r in runs if r.kind == "warm"] or [r for r in runs if r.kind == "cold"]
    process = [r for r in runs if r.kind == "process"]
    per = []
    for name in AGENT:
        cgroup_mib = median([r.per_cgroup.get(name, float("nan")) for r in warm])
        docker_mib = median([r.per_service.get(name, float("nan")) for r in warm])
        process_mib = median([r.per_service.get(name, float("nan")) for r in process])
        per.append(
            f"| {name} | {cgroup_mib:.1f} MiB | {docker_mib:.1f} MiB | {process_mib:.1f} MiB |"
        )
    cold_note = (
        [
            "A cold `mac start agent` (the image built from the host's wheelhouse) took "
            f"{_median(runs, 'cold', 'start_s') - _median(runs, 'warm', 'start_s'):.1f} s "
            "longer than a warm one (medians).",
            "",
        ]
        if counts["cold"] and counts["warm"]
        else []
    )
    return "\n".join(
        [
            f"`mac start agent` on a node in a private Docker engine (Debian's dockerd, "
            f"storage driver {storage}), MAC's image on the Debian base; the "
            f"master on the same machine under the process runtime, probing every "
            f"{INTERVAL} s. {len(AGENT)} agent services ({', '.join(AGENT)}); medians of the "
            "runs. *Online* is from the start of `mac start agent` until the master's API "
            "says Online.",
            "",
            "| agent | runs | `mac start agent` returns | node Online | cgroup memory "
            "(docker stats) | RSS of the services | containerd shims |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Per service (medians): the container's cgroup memory and its processes' RSS "
            "(warm runs), beside the service's RSS under the process runtime. RSS counts "
            "shared pages (the Python runtime, libraries) once per process; docker stats "
            "counts the container's own anonymous and active file pages."
            + (
                " Under the process runtime the Python exporters are one process "
                "(MAC_AGENT_BUNDLE), so each of them shows that whole process."
                if any(r.shared for r in process)
                else ""
            ),
            "",
            "| service | container (docker stats) | container (RSS) | process runtime (RSS) |",
            "|---|---|---|---|",
            *per,
            "",
            *cold_note,
            "Rerun: `sudo .venv/bin/python -m bench.docker_agent`.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.docker_agent", description=__doc__)
    ap.add_argument("--cold", type=int, default=2, help="cold runs (image built), default 2")
    ap.add_argument("--warm", type=int, default=3, help="warm runs and baseline runs, default 3")
    ap.add_argument("--no-write", action="store_true", help="print only; leave the docs alone")
    args = ap.parse_args(argv)
    reason = why_unavailable()
    if reason:
        print(f"Error: {reason}", file=sys.stderr)
        return 1
    runs, storage = measure(args.cold, args.warm)
    body = report(runs, storage)
    print(body)
    if not args.no_write:
        update_section("docker-agent", "Docker agent: time to Online and memory", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
