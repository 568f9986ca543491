"""What runs on an agent: the services of the contract table with this node's ports.

Both `mac doctor` (which services to check, where they listen) and the four agent
commands read the same specs, so they never disagree on a port. sys-exporter is
node_exporter itself under the process runtime (its argv comes from
exporters.node_exporter); a prestart step writes MAC's textfile facts and fails,
with the install command, where node_exporter is missing.

Under the process runtime the Python services run as one process, `exporters`
(exporters.bundle), unless MAC_AGENT_BUNDLE=0: the commands still see one spec per
service, and maccli.agent.bundled folds them into that process for the runtime and
unfolds its state into one row per service, each with its own health.
"""

from __future__ import annotations

import os
import sys

from contract.services import BY_NAME, SERVICES, SYS_EXPORTER
from exporters import node_exporter
from maccli.agent.bundled import BUNDLE_NAME, BundledRuntime
from maccli.agent.hardware import gpus
from maccli.runtimes import Runtime, ServiceSpec, choose_runtime
from node.config import SECRET_KEYS, NodeConfig, Source
from node.host import PROGRAMS, NodeExporterMissing, Roots, find_node_exporter

ROLE = "agent"
GPU_SERVICES = {"nvidia": "dcgm-exporter", "amd": "rocm-exporter"}


def moved_ports(specs: list[ServiceSpec]) -> str:
    """Words for the services that listen off the contract's port, "" when none.

    The master probes, and Prometheus scrapes, the contract's ports, never the ports an
    agent reports (contract/liveness.py: an agent cannot send the probes elsewhere), so a
    node whose services moved (MAC_PORT_OFFSET, MAC_<SERVICE>_PORT: meant for several
    agents on one test host) shows Offline and is not scraped.
    """
    moved = [
        f"{spec.name} on {spec.port} (the master asks {BY_NAME[spec.name].port})"
        for spec in specs
        if spec.name in BY_NAME and spec.port is not None and spec.port != BY_NAME[spec.name].port
    ]
    if not moved:
        return ""
    return (
        f"{', '.join(moved)}: the master probes and scrapes the contract's ports only, so it "
        "will show this node Offline and scrape nothing there. Moved ports are for several "
        "agents on one test host; on a real node: mac env unset MAC_PORT_OFFSET (and any "
        "MAC_<SERVICE>_PORT), then mac restart agent."
    )


def agent_specs(cfg: NodeConfig) -> list[ServiceSpec]:
    """The agent services with this node's ports (MAC_<SERVICE>_PORT / MAC_PORT_OFFSET)."""
    bind = cfg.value("MAC_BIND")
    probe_host = "127.0.0.1" if bind in {"0.0.0.0", "::", ""} else bind
    wanted = set(cfg.value("MAC_AGENT_SERVICES") or ())
    # The exporters see the files' settings too (BMC address and the like), never the secrets.
    env = {
        key: value
        for key, (value, source) in cfg.merged().items()
        if source in (Source.NODE, Source.USER) and key not in SECRET_KEYS
    }
    specs = []
    for service in SERVICES:
        if wanted and service.name not in wanted:
            continue
        port = cfg.service_port(service.name)
        argv = exporter_command(cfg, [service.name, "--port", str(port)])
        prestart: list[list[str]] = []
        if service.name == SYS_EXPORTER.name:
            argv, prestart = sys_exporter_command(cfg, bind, port)
        specs.append(
            ServiceSpec(
                service.name,
                argv,
                port=port,
                liveness_path=service.liveness_path,
                env=env,
                prestart=prestart,
                ready_timeout=cfg.value("MAC_START_TIMEOUT"),
                host=probe_host,
                bind=bind,
            )
        )
    return specs


def exporter_command(cfg: NodeConfig, services: list[str]) -> list[str]:
    """`python -m exporters <services...>` with this node's address and roots."""
    argv = [
        sys.executable,
        "-m",
        "exporters",
        *services,
        "--bind",
        cfg.value("MAC_BIND"),
    ]
    roots, default = cfg.roots(), Roots()
    for flag, given, usual in (
        ("--sys-root", roots.sys_root, default.sys_root),
        ("--proc-root", roots.proc_root, default.proc_root),
        ("--dev-root", roots.dev_root, default.dev_root),
    ):
        if given != usual:
            argv += [flag, given]
    if any(name.partition("=")[0] in GPU_SERVICES.values() for name in services):
        argv += ["--state-dir", gpu_state_dir(cfg)]
    return argv


def gpu_state_dir(cfg: NodeConfig) -> str:
    """Where the GPU exporters keep their GPUs' evidence across a restart
    (node.gpu.evidence_state): the agent's state folder, as Docker's mount does as root."""
    return str(cfg.state_dir / ROLE / "gpu")


def bundle_spec(cfg: NodeConfig, members: list[ServiceSpec]) -> ServiceSpec:
    """The one process that serves the Python services `members` (exporters.bundle).

    The runtime judges it by `/` of its first aiohttp service: that page answers
    while the process serves, even for a service whose build failed (whose own row
    then shows its failing /health). The members' own liveness URLs decide their rows.
    """
    first = next(m for m in members if m.liveness_path != "/docs")
    return ServiceSpec(
        BUNDLE_NAME,
        exporter_command(cfg, [f"{m.name}={m.port}" for m in members]),
        port=first.port,
        liveness_path="/",
        env=first.env,
        ready_timeout=max(m.ready_timeout for m in members),
        host=first.host,
        bind=first.bind,
    )


def bundle_wanted(cfg: NodeConfig) -> bool:
    """MAC_AGENT_BUNDLE (default on): the Python services in one process."""
    return cfg.value("MAC_AGENT_BUNDLE")


def textfile_dir(cfg: NodeConfig) -> str:
    """Where MAC writes its facts for node_exporter: MAC_TEXTFILE_DIR, else the state dir."""
    return str(cfg.value("MAC_TEXTFILE_DIR") or cfg.state_dir / ROLE / "textfile")


def sys_exporter_command(cfg: NodeConfig, bind: str, port: int) -> tuple[list[str], list[str]]:
    """(node_exporter's argv, the prestart that checks it and writes MAC's facts)."""
    explicit = cfg.value("MAC_NODE_EXPORTER")
    try:
        program = find_node_exporter(explicit)
    except NodeExporterMissing:
        # status and stop still need the spec; the prestart says how to install it.
        program = explicit or PROGRAMS[0]
    directory = textfile_dir(cfg)
    argv = node_exporter.node_exporter_argv(
        program,
        bind=bind,
        port=port,
        textfile_dir=directory,
        roots=cfg.roots(),
    )
    check = [sys.executable, "-m", "exporters.node_exporter", "--textfile-dir", directory]
    return argv, [check]


def runtime_and_specs(
    cfg: NodeConfig, override: str | None, remove_stale: bool = False
) -> tuple[Runtime, list[ServiceSpec]]:
    """The runtime, and the services it runs here.

    Under Docker a GPU exporter's container needs its vendor's devices, so it runs only
    on nodes with that vendor's GPUs (a Compose profile); as a process it runs anywhere
    and reports the missing backend in a gauge. As processes, the Python services
    share one (BundledRuntime) unless MAC_AGENT_BUNDLE=0.
    """
    runtime = choose_runtime(cfg, ROLE, override, remove_stale=remove_stale)
    specs = agent_specs(cfg)
    vendor, _ = gpus(cfg)
    if runtime.use_profiles([vendor] if vendor in GPU_SERVICES else []):
        # Compose substitutes ${NODE_NAME}, ${MAC_<SERVICE>_PORT}... from its environment:
        # give it the files' values too, as the process runtime gives them to its children
        # (the process environment still wins).
        env = specs[0].env if specs else {}
        runtime.pass_values({key: value for key, value in env.items() if key not in os.environ})
        keep = GPU_SERVICES.get(vendor)
        specs = [s for s in specs if s.name not in GPU_SERVICES.values() or s.name == keep]
        return runtime, specs
    members = [s for s in specs if s.name != SYS_EXPORTER.name]
    if bundle_wanted(cfg) and len(members) > 1:
        runtime = BundledRuntime(runtime, bundle_spec(cfg, members), members)
    return runtime, specs
