"""Which runtime runs the services here: MAC_RUNTIME / --runtime, else what the host offers."""

from __future__ import annotations

from maccli.output import CliError
from maccli.runtimes.base import Runtime
from maccli.runtimes.docker import DockerRuntime
from maccli.runtimes.dockerengine import engine_error
from maccli.runtimes.process import ProcessRuntime
from maccli.runtimes.supervisor import LOG_BACKUPS, LOG_MAX_BYTES
from maccli.systemd import isolation_unit_left, systemd_units
from node.config import NodeConfig
from node.host import Roots
from node.runner import Runner, run_command

# Docker's unit as its packages install it (docker.io, docker-ce), where `mac doctor`'s
# docker_enabled check looks for it too.
DOCKER_UNITS = (
    "/etc/systemd/system/docker.service",
    "/usr/lib/systemd/system/docker.service",
    "/lib/systemd/system/docker.service",
)


def engine_silence(run: Runner = run_command) -> str:
    """What the client said where no working engine answers (not merely a client:
    `docker info` must succeed); empty where one does.

    An engine that runs but refuses this user (not root, not in the `docker` group) is a
    CliError: falling back to the process runtime would report every container as a
    stopped process, and `mac logs` would find none."""
    done = run(["docker", "info", "--format", "{{.ServerVersion}}"])
    if done.returncode == 0:
        return ""
    said = f"{done.stderr}\n{done.stdout}".strip() or f"exit code {done.returncode}"
    if "permission denied" in said.lower() and "docker" in said.lower():
        raise engine_error(said)
    return said


def docker_engine_installed(roots: Roots) -> bool:
    """Whether this host has Docker's engine as a service (its unit file), running or not."""
    return any(roots.host(path).exists() for path in DOCKER_UNITS)


def _docker(cfg: NodeConfig, run: Runner, remove_stale: bool, units) -> DockerRuntime:
    left = isolation_unit_left(cfg.get) if units is None else None
    return DockerRuntime(run=run, remove_stale=remove_stale, systemd=units, left_unit=left)


def choose_runtime(
    cfg: NodeConfig,
    role: str,
    override: str | None = None,
    *,
    remove_stale: bool = False,
    run: Runner = run_command,
) -> Runtime:
    choice = (override or cfg.get("MAC_RUNTIME") or "auto").strip().lower()
    units = systemd_units(cfg.get)  # boot-time units where systemd runs (maccli.systemd)
    process = ProcessRuntime(
        cfg.state_dir,
        # Through the catalogue: `10s`, nan or -5 is an error naming it, not a traceback.
        grace=cfg.value("MAC_STOP_GRACE"),
        systemd=units,
        log_max_bytes=cfg.int_value("MAC_LOG_MAX_BYTES", LOG_MAX_BYTES),
        log_backups=cfg.int_value("MAC_LOG_BACKUPS", LOG_BACKUPS),
    )
    if choice == "process":
        return process
    if choice == "docker":
        return _docker(cfg, run, remove_stale, units)
    if choice != "auto":
        raise CliError(
            f"unknown runtime {choice!r}.",
            hint="Use docker, process or auto:",
            commands=["mac env set MAC_RUNTIME=auto"],
        )
    # Services this runtime already runs stay with it (stop and status find them).
    if process.has_state(role):
        return process
    silence = engine_silence(run)
    if not silence:
        return _docker(cfg, run, remove_stale, units)
    # An engine installed as this host's service that does not answer (stopped, or not
    # started at boot: the guide's "Docker isn't starting at boot") is this node's
    # runtime all the same: under `auto`, MAC runs in Docker wherever the host has it, and
    # the agent's containers come back by themselves with the engine (unless-stopped).
    # Taking the process runtime instead would list them all as stopped processes, and
    # `mac start` would run a second agent beside them. The unit file is the evidence
    # that holds for whoever runs `mac` (root, sudo, a user) while the engine is down:
    # MAC's containers are known only to the engine, and a record of MAC's own would be
    # per user (the state dir) or root's only (the per-node file). A host without the unit
    # never ran MAC in Docker: it keeps the process runtime.
    if docker_engine_installed(cfg.roots()):
        raise engine_error(
            silence,
            hint="Docker is installed here, so MAC's services run in it. Start it, and have "
            "it start at boot (its package may not), then run mac again (to run MAC as "
            "processes on this host instead: mac env set MAC_RUNTIME=process):",
        )
    return process
