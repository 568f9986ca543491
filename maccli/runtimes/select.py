"""Which runtime runs the services here: MAC_RUNTIME / --runtime, else what the host offers."""

from __future__ import annotations

from maccli.output import CliError
from maccli.runtimes.base import Runtime
from maccli.runtimes.docker import DockerRuntime
from maccli.runtimes.process import ProcessRuntime
from maccli.runtimes.supervisor import LOG_BACKUPS, LOG_MAX_BYTES
from maccli.systemd import isolation_unit_left, systemd_units
from node.config import NodeConfig
from node.runner import Runner, run_command


def docker_answers(run: Runner = run_command) -> bool:
    """A working engine, not merely a client: `docker info` must succeed.

    An engine that runs but refuses this user (not root, not in the `docker` group) is a
    CliError: falling back to the process runtime would report every container as a
    stopped process, and `mac logs` would find none."""
    done = run(["docker", "info", "--format", "{{.ServerVersion}}"])
    if done.returncode == 0:
        return True
    said = f"{done.stderr}\n{done.stdout}"
    if "permission denied" in said.lower() and "docker" in said.lower():
        raise CliError(
            "Docker runs here, but this user may not use it (permission denied on its "
            "socket), so mac cannot see the services it runs.",
            hint="Run mac as root, or add this user to the docker group (then log in again):",
            commands=["sudo mac status", "sudo usermod -aG docker $USER"],
        )
    return False


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
    if docker_answers(run):
        return _docker(cfg, run, remove_stale, units)
    return process
