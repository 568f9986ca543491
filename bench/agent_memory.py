"""Benchmark: the whole agent's resident memory under the process runtime, before and after.

Issue 13 asks for the agent at or under 150 MB resident, node_exporter included.
This starts the agent's eight services the way `mac start agent` does (the process
runtime: supervisord, one launcher per program, the services), on free loopback
ports and this machine's /sys and /proc, in two layouts measured in the same run:

- before: one Python process per service (``MAC_AGENT_BUNDLE=0``);
- after: the Python services in one process (exporters.bundle, the default).

Each service's liveness URL and /metrics is fetched a few times first so every
collector has run (steady state, not a cold start). Then the resident memory (RSS)
of every process of the role is summed: the services, and the supervision around
them (supervisord and the launchers), which are part of the agent too. PSS (shared
pages divided among the processes that share them) is given beside it, since an
RSS sum counts the interpreter's shared pages once per process. node_exporter alone
(Debian's defaults) is the baseline. Several runs, fresh processes each; medians.

Run: ``.venv/bin/python -m bench.agent_memory [--runs 3] [--no-write]`` (about 2 min).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.report import median, update_section
from contract.services import SERVICES, SYS_EXPORTER
from maccli.agent.specs import ROLE, runtime_and_specs
from node.config import NodeConfig
from testkit.ports import free_port

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
WARM_FETCHES = 3
MB = 1_000_000


@dataclass
class Sample:
    """One run's memory, in bytes."""

    services_rss: int  # the services' own processes
    supervision_rss: int  # supervisord and the launchers
    node_exporter_rss: int
    total_pss: int
    processes: int
    launchers: list[int]  # RSS of each launcher (maccli.runtimes.launch)

    @property
    def total_rss(self) -> int:
        return self.services_rss + self.supervision_rss


def _fetch(url: str) -> None:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            answer.read()
    except urllib.error.HTTPError as exc:  # an answer all the same (a 503 /health)
        exc.read()


def _config(state: Path, bundle: bool) -> NodeConfig:
    env = {
        "HOME": str(state),
        "MAC_STATE_DIR": str(state / "state"),
        "MAC_USER_ENV_FILE": str(state / "user-env"),
        "MAC_NODE_ENV_FILE": str(state / "node-env"),
        "MAC_TEXTFILE_DIR": str(state / "textfile"),
        "MAC_BIND": "127.0.0.1",
        "MAC_AGENT_BUNDLE": "1" if bundle else "0",
        "MAC_START_TIMEOUT": "60",
        "MAC_SYSTEMD": "no",  # a benchmark installs no boot-time unit
    }
    for service in SERVICES:
        env[f"MAC_{service.name.upper().replace('-', '_')}_PORT"] = str(free_port())
    return NodeConfig.load(env)


def _role_processes(supervisord_pid: int) -> list[psutil.Process]:
    root = psutil.Process(supervisord_pid)
    return [root, *root.children(recursive=True)]


def measure(bundle: bool) -> Sample:
    with tempfile.TemporaryDirectory(prefix="mac-agent-memory-") as tmp:
        cfg = _config(Path(tmp), bundle)
        runtime, specs = runtime_and_specs(cfg, "process")
        try:
            states = runtime.start(ROLE, specs)
            assert all(s.running for s in states), states
            for _ in range(WARM_FETCHES):
                for spec in specs:
                    _fetch(f"http://127.0.0.1:{spec.port}{spec.liveness_path}")
                    _fetch(f"http://127.0.0.1:{spec.port}/metrics")
            time.sleep(1)
            service_pids = {s.pid for s in runtime.status(ROLE, specs)}
            process = getattr(runtime, "inner", runtime)  # BundledRuntime wraps it
            supervisord = process.supervisor(ROLE).daemon_pid()
            procs = _role_processes(supervisord)
            rss = {p.pid: p.memory_info().rss for p in procs}
            pss = sum(p.memory_full_info().pss for p in procs)
            node_exporter_pid = next(s.pid for s in states if s.name == SYS_EXPORTER.name)
            return Sample(
                services_rss=sum(v for pid, v in rss.items() if pid in service_pids),
                supervision_rss=sum(v for pid, v in rss.items() if pid not in service_pids),
                node_exporter_rss=rss[node_exporter_pid],
                total_pss=pss,
                processes=len(procs),
                launchers=[rss[p.pid] for p in procs if "maccli.runtimes.launch" in p.cmdline()],
            )
        finally:
            runtime.stop(ROLE, specs)


def node_exporter_alone() -> int:
    """RSS of node_exporter with Debian's defaults after a few scrapes: the baseline."""
    port = free_port()
    proc = subprocess.Popen(
        [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                for _ in range(WARM_FETCHES):
                    _fetch(f"http://127.0.0.1:{port}/metrics")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        time.sleep(1)
        return psutil.Process(proc.pid).memory_info().rss
    finally:
        proc.terminate()
        proc.wait(10)


def bare_launcher() -> int:
    """RSS of an interpreter holding only what the launcher uses (json, subprocess, psutil)."""
    code = "import contextlib, json, os, signal, subprocess, sys, time, psutil; time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(1.5)
        return psutil.Process(proc.pid).memory_info().rss
    finally:
        proc.kill()
        proc.wait()


def _mb(value: float) -> str:
    return f"{value / MB:.0f} MB"


def report(before: list[Sample], after: list[Sample], baseline: list[int], bare: list[int]) -> str:
    def row(label: str, samples: list[Sample]) -> str:
        fields = ("services_rss", "supervision_rss", "total_rss", "total_pss", "node_exporter_rss")
        pick = {name: median([getattr(s, name) for s in samples]) for name in fields}
        return (
            f"| {label} | {samples[0].processes} | {_mb(pick['services_rss'])} | "
            f"{_mb(pick['node_exporter_rss'])} | {_mb(pick['supervision_rss'])} | "
            f"**{_mb(pick['total_rss'])}** | {_mb(pick['total_pss'])} |"
        )

    runs = len(after)
    launcher = median([median(s.launchers) for s in after])
    return "\n".join(
        [
            f"The agent's {len(SERVICES)} services under the process runtime "
            "(`mac start agent`'s own code path: supervisord, a launcher per program, the "
            "services), on this machine's /sys and /proc, after every liveness URL and "
            f"/metrics was fetched {WARM_FETCHES} times. Medians of {runs} runs, fresh "
            "processes each (`python -m bench.agent_memory`).",
            "",
            "| layout | processes | services RSS (node_exporter included) | "
            "node_exporter RSS | supervision RSS | whole agent RSS | whole agent PSS |",
            "|---|---|---|---|---|---|---|",
            row("before: one Python process per service (`MAC_AGENT_BUNDLE=0`)", before),
            row("after: the Python services in one process (default)", after),
            "",
            f"Baseline: node_exporter alone (Debian's defaults) {_mb(median(baseline))} RSS.",
            "",
            f"Where the supervision goes: each launcher is {_mb(launcher)} RSS, against "
            f"{_mb(median(bare))} for a bare interpreter holding only what the launcher "
            "imports; the rest is supervisord. Compare node_exporter's row with the "
            "baseline, measured in the same run.",
            "",
            "- *services* are the processes that serve the ports: node_exporter and the "
            "Python exporters;",
            "- *supervision* is supervisord and one launcher per program "
            "(maccli.runtimes.launch), which restart a crashed service;",
            "- RSS sums count the pages the processes share once per process (as `ps` "
            "does); PSS divides them, so it is what the agent costs the host.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.agent_memory", description=__doc__)
    ap.add_argument("--runs", type=int, default=3, help="runs of each layout, default 3")
    ap.add_argument("--no-write", action="store_true", help="print only; leave the docs alone")
    args = ap.parse_args(argv)
    before, after, baseline, bare = [], [], [], []
    for run in range(args.runs):
        # Alternate the layouts so a burst of load elsewhere hits both alike.
        before.append(measure(bundle=False))
        after.append(measure(bundle=True))
        baseline.append(node_exporter_alone())
        bare.append(bare_launcher())
        print(
            f"run {run + 1}: before {_mb(before[-1].total_rss)}, after {_mb(after[-1].total_rss)}"
            f" (services {_mb(after[-1].services_rss)}), node_exporter {_mb(baseline[-1])}",
            flush=True,
        )
    body = report(before, after, baseline, bare)
    print(body)
    if not args.no_write:
        update_section("agent-memory", "Agent memory: one process for the Python exporters", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
