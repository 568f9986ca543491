"""What runs on an agent: the services of the contract table with this node's ports.

Both `mac doctor` (which services to check, where they listen) and the four agent
commands read the same specs, so they never disagree on a port. sys-exporter is
node_exporter itself under the process runtime (its argv comes from
exporters.node_exporter); a prestart step writes MAC's textfile facts and fails,
with the install command, where node_exporter is missing.
"""

from __future__ import annotations

import os
import sys

from contract.services import SERVICES, SYS_EXPORTER
from exporters import node_exporter
from exporters.nodeconfig import SECRET_KEYS, NodeConfig, Source
from maccli.agent.hardware import gpus
from maccli.output import CliError
from maccli.runtimes import Runtime, ServiceSpec, choose_runtime
from maccli.runtimes.docker import DockerRuntime

ROLE = "agent"
GPU_SERVICES = {"nvidia": "dcgm-exporter", "amd": "rocm-exporter"}


def agent_specs(cfg: NodeConfig) -> list[ServiceSpec]:
    """The agent services with this node's ports (MAC_<SERVICE>_PORT / MAC_PORT_OFFSET)."""
    bind = cfg.get("MAC_BIND") or "0.0.0.0"
    probe_host = "127.0.0.1" if bind in {"0.0.0.0", "::", ""} else bind
    wanted = {s.strip() for s in (cfg.get("MAC_AGENT_SERVICES") or "").split(",") if s.strip()}
    roots = []
    for key, flag in (
        ("MAC_SYS_ROOT", "--sys-root"),
        ("MAC_PROC_ROOT", "--proc-root"),
        ("MAC_DEV_ROOT", "--dev-root"),
    ):
        if cfg.get(key):
            roots += [flag, cfg.get(key) or ""]
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
        argv = [sys.executable, "-m", "exporters", service.name, "--port", str(port)]
        argv += ["--bind", bind, *roots]
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


def textfile_dir(cfg: NodeConfig) -> str:
    """Where MAC writes its facts for node_exporter: MAC_TEXTFILE_DIR, else the state dir."""
    return cfg.get("MAC_TEXTFILE_DIR") or str(cfg.state_dir / ROLE / "textfile")


def sys_exporter_command(cfg: NodeConfig, bind: str, port: int) -> tuple[list[str], list[str]]:
    """(node_exporter's argv, the prestart that checks it and writes MAC's facts)."""
    explicit = cfg.get("MAC_NODE_EXPORTER")
    try:
        program = node_exporter.find_node_exporter(explicit)
    except node_exporter.NodeExporterMissing:
        # status and stop still need the spec; the prestart says how to install it.
        program = explicit or node_exporter.PROGRAMS[0]
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
    and reports the missing backend in a gauge.
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
