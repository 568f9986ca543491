"""What runs on an agent: the services of the contract table with this node's ports.

Both `mac doctor` (which services to check, where they listen) and the four agent
commands read the same specs, so they never disagree on a port. sys-exporter is
node_exporter itself under the process runtime (its argv comes from
exporters.node_exporter); a prestart step writes MAC's textfile facts and fails,
with the install command, where node_exporter is missing.

Under the process runtime the Python services run as one process, `exporters`
(exporters.bundle), unless MAC_AGENT_BUNDLE=0: the commands still see one spec per
service, and maccli.agent.bundle folds them into that process for the runtime and
unfolds its state into one row per service, each with its own health.
"""

from __future__ import annotations

import os
import sys

from contract.services import SERVICES, SYS_EXPORTER
from exporters import node_exporter
from maccli.agent.bundle import BUNDLE_NAME, BundledRuntime
from maccli.agent.hardware import gpus
from maccli.output import CliError
from maccli.runtimes import Runtime, ServiceSpec, choose_runtime
from maccli.runtimes.docker import DockerRuntime
from node.config import SECRET_KEYS, NodeConfig, Source
from node.host import PROGRAMS, NodeExporterMissing, find_node_exporter

ROLE = "agent"
GPU_SERVICES = {"nvidia": "dcgm-exporter", "amd": "rocm-exporter"}


def agent_specs(cfg: NodeConfig) -> list[ServiceSpec]:
    """The agent services with this node's ports (MAC_<SERVICE>_PORT / MAC_PORT_OFFSET)."""
    bind = cfg.get("MAC_BIND") or "0.0.0.0"
    probe_host = "127.0.0.1" if bind in {"0.0.0.0", "::", ""} else bind
    wanted = {s.strip() for s in (cfg.get("MAC_AGENT_SERVICES") or "").split(",") if s.strip()}
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
        port = cfg.service_port(service.name, service.port)
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
                ready_timeout=float(cfg.get("MAC_START_TIMEOUT") or 30),
                host=probe_host,
                bind=bind,
            )
        )
    unknown = wanted - {s.name for s in SERVICES}
    if unknown:
        raise CliError(
            f"MAC_AGENT_SERVICES names unknown services: {', '.join(sorted(unknown))}.",
            hint=f"Known services: {', '.join(s.name for s in SERVICES)}. Fix it with:",
            commands=["mac env unset MAC_AGENT_SERVICES"],
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
        cfg.get("MAC_BIND") or "0.0.0.0",
    ]
    for key, flag in (
        ("MAC_SYS_ROOT", "--sys-root"),
        ("MAC_PROC_ROOT", "--proc-root"),
        ("MAC_DEV_ROOT", "--dev-root"),
    ):
        if cfg.get(key):
            argv += [flag, cfg.get(key) or ""]
    return argv


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
    value = (cfg.get("MAC_AGENT_BUNDLE") or "1").strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise CliError(
        f"MAC_AGENT_BUNDLE={value!r} is neither 1 nor 0.",
        hint="1 runs the Python exporters as one process (the default), 0 one process each:",
        commands=["mac env set MAC_AGENT_BUNDLE=1"],
    )


def textfile_dir(cfg: NodeConfig) -> str:
    """Where MAC writes its facts for node_exporter: MAC_TEXTFILE_DIR, else the state dir."""
    return cfg.get("MAC_TEXTFILE_DIR") or str(cfg.state_dir / ROLE / "textfile")


def sys_exporter_command(cfg: NodeConfig, bind: str, port: int) -> tuple[list[str], list[str]]:
    """(node_exporter's argv, the prestart that checks it and writes MAC's facts)."""
    explicit = cfg.get("MAC_NODE_EXPORTER")
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
        proc_root=cfg.get("MAC_PROC_ROOT") or "/proc",
        sys_root=cfg.get("MAC_SYS_ROOT") or "/sys",
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
    if isinstance(runtime, DockerRuntime):
        # Compose substitutes ${NODE_NAME}, ${MAC_<SERVICE>_PORT}... from its environment:
        # give it the files' values too, as the process runtime gives them to its children.
        for key, value in specs[0].env.items() if specs else ():
            os.environ.setdefault(key, value)
        vendor, _ = gpus(cfg)
        runtime.profiles = [vendor] if vendor in GPU_SERVICES else []
        keep = GPU_SERVICES.get(vendor)
        specs = [s for s in specs if s.name not in GPU_SERVICES.values() or s.name == keep]
        return runtime, specs
    members = [s for s in specs if s.name != SYS_EXPORTER.name]
    if bundle_wanted(cfg) and len(members) > 1:
        runtime = BundledRuntime(runtime, bundle_spec(cfg, members), members)
    return runtime, specs
