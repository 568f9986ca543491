"""Docker on an agent: the engine starts at boot, and no foreign `mac-*` containers block ours.

`restart: unless-stopped` brings the agent's containers back after a reboot only if
the Docker service itself starts; Debian's package does not always enable it. And a
raw `docker compose up` from another directory creates mac-* containers under another
Compose project, which makes our `docker compose -p mac up` fail with a bare Conflict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from node.checks.base import CheckContext, CheckResult, CheckStatus, runner
from node.checks.fixes import Run
from node.runner import Runner

COMPOSE_PROJECT = "mac"
ENABLE_DOCKER = Run(("systemctl", "enable", "--now", "docker"))
PS_FORMAT = '{{.Names}}\t{{.Label "com.docker.compose.project"}}'
REMOVE_STALE_COMMAND = "docker rm -f $(docker ps -aq --filter 'name=^/mac-')"
_ENABLED_STATES = {"enabled", "enabled-runtime", "static", "alias", "indirect", "generated"}


@dataclass(frozen=True)
class Container:
    name: str
    project: str


class DockerUnavailable(RuntimeError):
    """The docker command is missing or its engine does not answer."""


def list_mac_containers(run: Runner) -> list[Container]:
    """Every container whose name starts with mac-, with its Compose project (may be '')."""
    result = run(["docker", "ps", "-a", "--filter", "name=^/mac-", "--format", PS_FORMAT])
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip().splitlines()
        raise DockerUnavailable(reason[-1] if reason else f"exit code {result.returncode}")
    containers = []
    for line in result.stdout.splitlines():
        if not line.strip():
            continue
        name, _, project = line.partition("\t")
        containers.append(Container(name.strip().lstrip("/"), project.strip()))
    return containers


def stale_containers(run: Runner, project: str = COMPOSE_PROJECT) -> list[Container]:
    return [c for c in list_mac_containers(run) if c.project != project]


def describe_stale(stale: list[Container]) -> str:
    return ", ".join(f"{c.name} (project {c.project or 'none'})" for c in stale)


def check_stale_containers(ctx: CheckContext) -> CheckResult:
    title = "no mac-* containers left by another Compose project"
    try:
        stale = stale_containers(runner(ctx), ctx.extra.get("docker_project", COMPOSE_PROJECT))
    except DockerUnavailable as exc:
        return CheckResult("stale_containers", title, CheckStatus.SKIP, f"Docker: {exc}")
    if not stale:
        return CheckResult("stale_containers", title, CheckStatus.PASS, "none found")
    return CheckResult(
        "stale_containers",
        title,
        CheckStatus.FAIL,
        f"{describe_stale(stale)}: `mac start agent` would fail with "
        '"Conflict. The container name ... is already in use".',
        # Exactly the foreign ones: the generic REMOVE_STALE_COMMAND would take ours too.
        steps=(Run(("docker", "rm", "-f", *(c.name for c in stale)), root=False),),
    )


def _unit_paths(ctx: CheckContext) -> list[Path]:
    return [
        ctx.local("/etc/systemd/system/docker.service"),
        ctx.local("/usr/lib/systemd/system/docker.service"),
        ctx.local("/lib/systemd/system/docker.service"),
    ]


def check_docker_enabled(ctx: CheckContext) -> CheckResult:
    title = "Docker starts at boot"
    installed = any(path.exists() for path in _unit_paths(ctx))
    answer = runner(ctx)(["systemctl", "is-enabled", "docker.service"])
    state = answer.stdout.strip().splitlines()[0] if answer.stdout.strip() else ""
    if state in _ENABLED_STATES:
        return CheckResult("docker_enabled", title, CheckStatus.PASS, f"docker.service is {state}")
    if state in {"disabled", "masked", "masked-runtime", "linked", "linked-runtime"}:
        return CheckResult(
            "docker_enabled",
            title,
            CheckStatus.FAIL,
            f"docker.service is {state}: after a reboot the agent's containers stay down.",
            steps=(
                (Run(("systemctl", "unmask", "docker")), ENABLE_DOCKER)
                if state.startswith("masked")
                else (ENABLE_DOCKER,)
            ),
        )
    if not installed:
        return CheckResult(
            "docker_enabled",
            title,
            CheckStatus.SKIP,
            "the Docker engine is not installed (agents here use the process runtime).",
        )
    # systemctl cannot tell (no systemd as PID 1, or a chroot): read the enablement links.
    wants = ctx.local("/etc/systemd/system/multi-user.target.wants/docker.service")
    if wants.exists() or wants.is_symlink():
        return CheckResult(
            "docker_enabled", title, CheckStatus.PASS, f"{wants} links docker.service"
        )
    return CheckResult(
        "docker_enabled",
        title,
        CheckStatus.FAIL,
        f"docker.service is installed but not enabled ({wants} is missing): after a reboot "
        "the agent's containers stay down.",
        steps=(ENABLE_DOCKER,),
    )


CHECKS = (check_docker_enabled, check_stale_containers)
