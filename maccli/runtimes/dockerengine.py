"""What `mac` says of the Docker engine and of Compose: which Compose there is, an engine
that does not answer, leftover containers of another project, and Compose's own errors.

The docker runtime (maccli.runtimes.docker) and the runtime selection
(maccli.runtimes.select) both say these things, in the same words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from maccli.output import CliError
from node.checks.docker import (
    REMOVE_STALE_COMMAND,
    Container,
    DockerUnavailable,
    describe_stale,
    list_mac_containers,
)
from node.runner import Runner, run_command

# Docker's Conflict names the container: `The container name "/mac-x" is already in use`.
CONFLICT_NAME = re.compile(r'container name "/([^"]+)" is already in use')


def find_compose(run: Runner = run_command) -> list[str]:
    """`docker compose` (the v2 plugin) where it answers, else `docker-compose` (1.29)."""
    if run(["docker", "compose", "version"]).returncode == 0:
        return ["docker", "compose"]
    if run(["docker-compose", "version"]).returncode == 0:
        return ["docker-compose"]
    raise CliError(
        "Docker Compose is missing: neither `docker compose` (the v2 plugin) nor "
        "`docker-compose` answers.",
        hint="Install Debian's Compose (or Docker's docker-compose-plugin), then run again:",
        commands=["sudo apt-get install docker-compose", "mac start agent"],
    )


def engine_error(said: str, hint: str = "") -> CliError:
    """What a failed docker call means for the person: the engine refuses this user
    (permission denied on its socket), or it does not answer. Either way nothing can
    be known of the containers, which keep running (or come back with the engine)."""
    lines = [line.strip() for line in said.strip().splitlines() if line.strip()]
    if "permission denied" in said.lower() and "docker" in said.lower():
        return CliError(
            "Docker runs here, but this user may not use it (permission denied on its "
            "socket), so mac cannot see the services it runs.",
            hint="Run mac as root, or add this user to the docker group (then log in again):",
            commands=["sudo mac status", "sudo usermod -aG docker $USER"],
        )
    return CliError(
        f"the Docker engine does not answer: {lines[-1] if lines else 'no answer'}",
        hint=hint
        or "Start it, and have it start at boot (its package may not), then run mac again:",
        commands=["sudo systemctl enable --now docker"],
        rerun=True,
    )


def stale_error(role: str, stale: Sequence[Container], ours: bool) -> CliError:
    """The foreign containers, and the command that removes exactly those.

    The guide's `docker rm -f $(docker ps -aq --filter 'name=^/mac-')` removes MAC's own
    containers too (a master's beside the agent, which nothing would bring back): it is
    shown, as a note, only where MAC has none on this engine.
    """
    commands = [f"docker rm -f {' '.join(c.name for c in stale)}", f"mac start {role}"]
    if not ours:
        commands += [
            "# the guide's form does the same here (it removes every mac-* container, and "
            "none is MAC's own yet):",
            REMOVE_STALE_COMMAND,
        ]
    return CliError(
        f"containers left by another Compose project hold MAC's names: {describe_stale(stale)}.",
        hint=(
            'Docker would refuse with: Conflict. The container name "/mac-..." is already '
            "in use. Remove them (only them) and start again (or add --remove-stale):"
        ),
        commands=commands,
    )


def mac_containers(run: Runner) -> list[Container]:
    """Every mac-* container of the engine, with its project; the engine's silence is an
    error (engine_error), never an empty list."""
    try:
        return list_mac_containers(run)
    except DockerUnavailable as exc:
        raise engine_error(str(exc)) from None


def conflict_error(run: Runner, project: str, role: str, said: str) -> CliError | None:
    """Compose met a leftover that appeared after the check: the same advice, by name
    (as the engine lists them now, else as its Conflict names them). None when `said`
    names no container."""
    try:
        found = list_mac_containers(run)
    except DockerUnavailable:
        found = []
    stale = [c for c in found if c.project != project]
    stale = stale or [Container(name, "") for name in CONFLICT_NAME.findall(said)]
    if not stale:
        return None
    return stale_error(role, stale, ours=any(c.project == project for c in found))


def compose_errors(output: str, code: int) -> str:
    """What went wrong in Compose's output: its ERROR lines (1.29 ends with a bare
    "Encountered errors while bringing up the project."), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("ERROR:", "Error"))]
    # 1.29 prints each failure twice ("for mac-x" and "for x"): once is enough.
    # ("ERROR: for NAME  WHAT": only WHAT)
    unique = list(dict.fromkeys(e.partition("  ")[2] if "  " in e else e for e in errors))
    if unique:
        return "; ".join(unique)
    return lines[-1] if lines else f"exit code {code}"
