"""The docker runtime: `docker compose -p mac` with the compose files in docker/.

Before `up`, containers named mac-* that belong to another Compose project (a raw
`docker compose up` elsewhere, project "deploy") are found, because Docker would
otherwise stop with a bare `Conflict. The container name "/mac-..." is already in use`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from exporters.checks.base import CommandResult, Runner, run_command
from exporters.checks.docker import (
    COMPOSE_PROJECT,
    REMOVE_STALE_COMMAND,
    DockerUnavailable,
    describe_stale,
    stale_containers,
)
from maccli.output import CliError, spinner
from maccli.runtimes.base import Runtime, ServiceSpec, ServiceState, probe

COMPOSE_FILES = {"agent": "docker-compose.agent.yml", "master": "docker-compose.master.yml"}


def default_compose_dir() -> Path:
    """docker/ of this checkout, else where a package install puts it."""
    explicit = os.environ.get("MAC_COMPOSE_DIR")
    if explicit:
        return Path(explicit)
    checkout = Path(__file__).resolve().parents[2] / "docker"
    return checkout if checkout.is_dir() else Path("/usr/share/mac/docker")


def stale_error(role: str, names: str) -> CliError:
    return CliError(
        f"containers left by another Compose project hold MAC's names: {names}.",
        hint=(
            'Docker would refuse with: Conflict. The container name "/mac-..." is already '
            "in use. Remove them and start again (or add --remove-stale):"
        ),
        commands=[REMOVE_STALE_COMMAND, f"mac start {role}"],
    )


class DockerRuntime(Runtime):
    name = "docker"

    def __init__(
        self,
        compose_dir: Path | None = None,
        *,
        run: Runner = run_command,
        remove_stale: bool = False,
        project: str = COMPOSE_PROJECT,
        profiles: list[str] | None = None,
    ) -> None:
        self.compose_dir = Path(compose_dir or default_compose_dir())
        self.run = run
        self.remove_stale = remove_stale
        self.project = project
        # Compose profiles of optional services (nvidia: dcgm-exporter, amd: rocm-exporter).
        self.profiles = list(profiles or [])

    def compose_file(self, role: str) -> Path:
        return self.compose_dir / COMPOSE_FILES[role]

    def compose(self, role: str, *args: str) -> list[str]:
        profiles = [arg for name in self.profiles for arg in ("--profile", name)]
        file = str(self.compose_file(role))
        return ["docker", "compose", "-p", self.project, "-f", file, *profiles, *args]

    def _call(self, argv: list[str]) -> CommandResult:
        return self.run(argv)

    def _clear_stale(self, role: str) -> None:
        try:
            stale = stale_containers(self.run, self.project)
        except DockerUnavailable as exc:
            raise CliError(
                f"the Docker engine does not answer: {exc}",
                hint="Start Docker (and enable it at boot), or use the process runtime:",
                commands=[
                    "sudo systemctl enable --now docker",
                    f"mac start {role} --runtime process",
                ],
            ) from None
        if not stale:
            return
        if not self.remove_stale:
            raise stale_error(role, describe_stale(stale))
        result = self._call(["docker", "rm", "-f", *(c.name for c in stale)])
        if result.returncode != 0:
            raise CliError(
                f"could not remove {describe_stale(stale)}: {result.stderr.strip()}",
                commands=[REMOVE_STALE_COMMAND],
            )

    def start(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        self._clear_stale(role)
        with spinner(f"docker compose -p {self.project} up -d ({role}) ..."):
            result = self._call(self.compose(role, "up", "-d"))
        if result.returncode != 0:
            output = (result.stderr or result.stdout).strip()
            if "Conflict" in output and "already in use" in output:
                raise stale_error(role, output.splitlines()[-1])
            last = output.splitlines()[-1] if output else f"exit code {result.returncode}"
            raise CliError(
                f"docker compose up failed: {last}",
                commands=[
                    " ".join(self.compose(role, "logs", "--tail", "50")),
                    f"mac start {role}",
                ],
            )
        return self.status(role, specs)

    def stop(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        with spinner(f"docker compose -p {self.project} down ({role}) ..."):
            result = self._call(self.compose(role, "down"))
        if result.returncode != 0:
            raise CliError(
                f"docker compose down failed: {(result.stderr or result.stdout).strip()}",
                commands=[" ".join(self.compose(role, "ps", "-a"))],
            )
        return self.status(role, specs)

    def restart(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        self._clear_stale(role)
        with spinner(f"docker compose -p {self.project} restart ({role}) ..."):
            result = self._call(self.compose(role, "up", "-d", "--force-recreate"))
        if result.returncode != 0:
            raise CliError(
                f"docker compose restart failed: {(result.stderr or result.stdout).strip()}",
                commands=[" ".join(self.compose(role, "logs", "--tail", "50"))],
            )
        return self.status(role, specs)

    def _containers(self, role: str) -> dict[str, dict]:
        result = self._call(self.compose(role, "ps", "-a", "--format", "json"))
        if result.returncode != 0:
            return {}
        text = result.stdout.strip()
        rows: list[dict] = []
        if text.startswith("["):
            rows = json.loads(text)
        else:  # newer Compose prints one JSON object per line
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        return {row.get("Service", ""): row for row in rows}

    def _started_at(self, names: list[str]) -> dict[str, float]:
        if not names:
            return {}
        result = self._call(
            ["docker", "inspect", "--format", "{{.Name}} {{.State.StartedAt}}", *names]
        )
        started = {}
        for line in result.stdout.splitlines():
            name, _, stamp = line.strip().partition(" ")
            try:
                when = datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00")
            except ValueError:
                continue
            started[name.lstrip("/")] = when.timestamp()
        return started

    def status(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        import time

        rows = self._containers(role)
        names = [row.get("Name", "") for row in rows.values() if row.get("State") == "running"]
        started = self._started_at(names)
        states = []
        for spec in specs:
            row = rows.get(spec.name)
            if row is None:
                states.append(ServiceState(spec.name, "stopped", port=spec.port))
                continue
            state = row.get("State", "unknown")
            name = row.get("Name", "")
            uptime = time.time() - started[name] if name in started else None
            states.append(
                ServiceState(
                    spec.name,
                    state,
                    port=spec.port,
                    uptime=uptime,
                    health=probe(spec.liveness_url) if state == "running" else "-",
                    detail=f"{name}: {row.get('Status', '')}",
                )
            )
        return states
