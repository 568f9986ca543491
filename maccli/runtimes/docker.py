"""The docker runtime: Compose project `mac` with the compose files in docker/.

Compose comes as the v2 plugin (`docker compose`) or, on Debian's docker.io, as
`docker-compose` 1.29: both are driven with the same files and `-p mac`, and what the
runtime reads back (containers, states, health) comes from the engine itself
(`docker ps` / `docker inspect`), which both versions label the same way.

The agent's network mode (MAC_AGENT_NETWORK, chosen by maccli.agent.network) is a
second compose file over docker-compose.agent.yml: docker-compose.agent.host.yml
(every exporter on the host network) or docker-compose.agent.bridge.yml (the guide's
published ports). Each exporter listens on the node's own port for it, which this
runtime hands to Compose as MAC_<SERVICE>_PORT.

The master's network keeps other hosts out by rules of MAC's own in Docker's DOCKER-USER
chain (maccli.runtimes.dockerfence), put in after every `up` and taken out at `down`.

Before `up`: MAC's image is built when it is missing (offline, maccli.runtimes.dockerimage),
the AMD profile's devices must exist, and containers named mac-* that belong to another
Compose project (a raw `docker compose up` elsewhere, project "deploy") are found,
because Docker would otherwise stop with a bare
`Conflict. The container name "/mac-..." is already in use`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

import yaml

from contract.services import AgentNetwork
from maccli import output
from maccli.output import CliError, spinner
from maccli.runtimes import dockerfence
from maccli.runtimes.base import Runtime, ServiceSpec, ServiceState, probe
from maccli.runtimes.dockerimage import DEFAULT_IMAGE, ImageError, build_image, image_exists
from maccli.runtimes.dockerimage import source_root as image_source
from maccli.runtimes.dockerlogs import docker_logs
from maccli.systemd import ISOLATION_UNIT, SystemdUnits
from node.checks.docker import (
    COMPOSE_PROJECT,
    REMOVE_STALE_COMMAND,
    DockerUnavailable,
    describe_stale,
    stale_containers,
)
from node.config import NodeConfig, Source
from node.runner import CommandResult, Runner, run_command

COMPOSE_FILES = {"agent": "docker-compose.agent.yml", "master": "docker-compose.master.yml"}
# The agent's network modes, each an overlay of the agent's file (contract AgentNetwork).
NETWORK_FILES = {
    AgentNetwork.HOST: "docker-compose.agent.host.yml",
    AgentNetwork.BRIDGE: "docker-compose.agent.bridge.yml",
}
BRIDGE_NETWORK = "agent"  # the bridge of docker-compose.agent.bridge.yml
MASTER_NETWORK = "master"  # the master's own network (docker-compose.master.yml)
PROJECT_LABEL, SERVICE_LABEL = "com.docker.compose.project", "com.docker.compose.service"
AMD_DEVICES = ("kfd", "dri")
COMPOSE_TIMEOUT = 600.0  # seconds: `up` may create every container from scratch
COMPOSE_VARIABLE = re.compile(r"\$\{([A-Z][A-Z0-9_]*)")


def passed_through(compose_text: str) -> set[str]:
    """The environment entries of a compose file's services that have no value."""
    try:
        document = yaml.safe_load(compose_text) or {}
    except yaml.YAMLError:
        return set()  # compose itself says what is wrong with the file
    names: set[str] = set()
    for service in (document.get("services") or {}).values():
        environment = (service or {}).get("environment") or {}
        if isinstance(environment, dict):
            names.update(name for name, value in environment.items() if value is None)
        else:
            names.update(entry for entry in environment if "=" not in entry)
    return names


def default_compose_dir() -> Path:
    """docker/ of this checkout, else where a package install puts it."""
    explicit = os.environ.get("MAC_COMPOSE_DIR")
    if explicit:
        return Path(explicit)
    checkout = Path(__file__).resolve().parents[2] / "docker"
    return checkout if checkout.is_dir() else Path("/usr/share/mac/docker")


def run_long(argv: Sequence[str], env: Mapping[str, str] | None = None) -> CommandResult:
    return run_command(argv, timeout=COMPOSE_TIMEOUT, env=env)


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


def stale_error(role: str, names: str) -> CliError:
    return CliError(
        f"containers left by another Compose project hold MAC's names: {names}.",
        hint=(
            'Docker would refuse with: Conflict. The container name "/mac-..." is already '
            "in use. Remove them and start again (or add --remove-stale):"
        ),
        commands=[REMOVE_STALE_COMMAND, f"mac start {role}"],
    )


def _words(exc: CliError | OSError) -> str:
    """What a failed systemd step said, for a warning."""
    return exc.message if isinstance(exc, CliError) else str(exc)


class DockerRuntime(Runtime):
    name = "docker"
    own_network = True
    network_modes = (AgentNetwork.HOST, AgentNetwork.BRIDGE)

    def __init__(
        self,
        compose_dir: Path | None = None,
        *,
        run: Runner = run_long,
        remove_stale: bool = False,
        project: str = COMPOSE_PROJECT,
        profiles: list[str] | None = None,
        systemd: SystemdUnits | None = None,
        left_unit: Path | None = None,
    ) -> None:
        self.compose_dir = Path(compose_dir or default_compose_dir())
        # run_command's 10 s default (what runtime selection hands over) would cut a
        # `compose up` that creates containers short: those calls need the long timeout.
        self.run = run_long if run is run_command else run
        self.remove_stale = remove_stale
        self.project = project
        # Where systemd runs: the boot-time unit that puts the master's rules back. Where
        # `mac` may not touch it, the one an earlier start left (maccli.systemd).
        self.systemd = systemd
        self.left_unit = left_unit
        # Compose profiles of optional services (nvidia: dcgm-exporter, amd: rocm-exporter).
        self.profiles = list(profiles or [])
        # The agent's network mode (maccli.agent.network sets it); None: no overlay. And
        # the mode its containers ran in before this command, when that was seen.
        self.network: AgentNetwork | None = None
        self.previous_network: AgentNetwork | None = None
        # Compose files written from the specs for this start, read in place of the role's
        # own (the master's: maccli.master.compose, and scale-out mode's overlay).
        self.files: list[Path] = []
        # What Compose substitutes for ${NAME} beyond mac's environment and env files:
        # the values `mac` passes (pass_values), given to its process alone.
        self.values: dict[str, str] = {}
        self._compose: list[str] | None = None

    @property
    def image(self) -> str:
        # As compose_env gives it to Compose: the environment, else the env files
        # (`mac env set MAC_IMAGE=...`), else the default.
        return NodeConfig.load().get("MAC_IMAGE") or DEFAULT_IMAGE

    def compose_files(self, role: str) -> list[Path]:
        """Those written for this start, else the role's compose file, then the agent's
        network-mode overlay."""
        if self.files:
            return list(self.files)
        files = [self.compose_dir / COMPOSE_FILES[role]]
        if role == "agent" and self.network is not None:
            files.append(self.compose_dir / NETWORK_FILES[self.network])
        return files

    def compose(self, role: str, *args: str) -> list[str]:
        if self._compose is None:
            self._compose = find_compose(self.run)
        profiles = [arg for name in self.profiles for arg in ("--profile", name)]
        files = [arg for path in self.compose_files(role) for arg in ("-f", str(path))]
        return [*self._compose, "-p", self.project, *files, *profiles, *args]

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
        result = self.run(["docker", "rm", "-f", *(c.name for c in stale)])
        if result.returncode != 0:
            raise CliError(
                f"could not remove {describe_stale(stale)}: {result.stderr.strip()}",
                commands=[REMOVE_STALE_COMMAND],
            )

    def _check_devices(self) -> None:
        if "amd" not in self.profiles:
            return
        dev = Path(os.environ.get("MAC_DEV_ROOT") or "/dev")
        missing = [str(dev / name) for name in AMD_DEVICES if not (dev / name).exists()]
        if missing:
            raise CliError(
                f"rocm-exporter needs {' and '.join(str(dev / n) for n in AMD_DEVICES)} passed "
                f"into its container, and {', '.join(missing)} is missing here: the amdgpu "
                "driver is not loaded.",
                hint="Load it (the ROCm kernel driver), check, then run again:",
                commands=["sudo modprobe amdgpu", "lsmod | grep amdgpu", "mac start agent"],
            )

    def _ensure_image(self) -> None:
        if image_exists(self.image, self.run):
            return
        source = image_source(self.compose_dir)
        if source is None:
            raise CliError(
                f"the image {self.image} is not on this node and there is no MAC source "
                "here to build it from.",
                hint="Load the images saved on a build machine (scripts/docker-images --save):",
                commands=["docker load -i mac-images.tar", "mac start agent"],
            )
        try:
            build_image(source, self.image, run=self.run)
        except ImageError as exc:
            raise CliError(str(exc), commands=["scripts/docker-images --help"]) from None

    def pass_values(self, values: Mapping[str, str]) -> None:
        self.values.update(values)

    def use_profiles(self, names: Sequence[str]) -> bool:
        self.profiles = list(names)
        return True

    def use_files(self, paths: Sequence[Path]) -> None:
        self.files = list(paths)

    def use_network(self, mode: AgentNetwork, running: AgentNetwork | None = None) -> None:
        self.network, self.previous_network = mode, running

    def compose_env(self, role: str, specs: Sequence[ServiceSpec]) -> dict[str, str]:
        """The environment of Compose's own process, from which it substitutes ${NAME}:
        mac's environment, the env files' values (`mac env set MAC_METRICS_TOKEN=...` on
        the master) as the process runtime gives them to its services, each service's
        port as the node's configuration gives it, and the values mac passed."""
        env = dict(os.environ)
        names = self._compose_variables(role)
        cfg = NodeConfig.load()
        for name in sorted(names - set(os.environ)):
            value, source = cfg.lookup(name)
            if value is not None and source in (Source.NODE, Source.USER):
                env[name] = value
        # MAC_<SERVICE>_PORT, else the table's port plus MAC_PORT_OFFSET.
        for spec in specs:
            name = f"MAC_{spec.name.upper().replace('-', '_')}_PORT"
            if spec.port is not None and name in names:
                env[name] = str(spec.port)
        env = {**env, **self.values}
        if "NODE_NAME" in names:
            # Always the name the node registers under, set or not: a bridge-mode container's
            # own host name is its id, which would become the exporters' Hostname label.
            node_name, _ = cfg.node_name()
            if node_name:
                env["NODE_NAME"] = node_name
        return env

    def _compose_variables(self, role: str) -> set[str]:
        """The names the compose files take from mac's environment: each ${NAME}, and
        each environment entry without a value (Compose passes those through)."""
        names: set[str] = set()
        for path in self.compose_files(role):
            try:
                text = path.read_text()
            except OSError:
                continue  # compose itself says that the file is missing
            names.update(COMPOSE_VARIABLE.findall(text))
            names.update(passed_through(text))
        return names

    def running_network(self, specs: Sequence[ServiceSpec]) -> AgentNetwork | None:
        """The mode the agent's containers run in now, None when there are none.

        nic-exporter is on the host network in both modes; any other exporter on a
        network of its own means bridge mode.
        """
        modes = {
            row.get("HostConfig", {}).get("NetworkMode", "")
            for name, row in self._containers(specs).items()
            if name != "nic-exporter"
        }
        if not modes:
            return None
        return AgentNetwork.HOST if modes == {"host"} else AgentNetwork.BRIDGE

    def drop_bridge_network(self) -> None:
        """Remove the bridge that bridge mode left, once the agent runs in host mode.

        Compose removes only the networks of the files it is given, and host mode's
        files name none; an unused bridge would stay behind (harmless, but confusing
        in `docker network ls`). A network still in use is left alone by Docker.
        """
        self.run(["docker", "network", "rm", f"{self.project}_{BRIDGE_NETWORK}"])

    def _up(self, role: str, specs: Sequence[ServiceSpec], *extra: str) -> None:
        self._clear_stale(role)
        self._check_devices()
        self._ensure_image()
        argv = self.compose(role, "up", "-d", "--no-build", *extra)
        tool = " ".join(self._compose or ["docker", "compose"])
        with spinner(f"{tool} -p {self.project} up -d ({role}) ..."):
            result = self.run(argv, env=self.compose_env(role, specs))
        if result.returncode != 0:
            output = (result.stderr or result.stdout).strip()
            if "Conflict" in output and "already in use" in output:
                raise stale_error(role, output.splitlines()[-1])
            raise CliError(
                f"{tool} up failed: {compose_errors(output, result.returncode)}",
                commands=[
                    " ".join(self.compose(role, "logs", "--tail", "50")),
                    f"mac start {role}",
                ],
            )

    def start(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        self._up(role, specs)
        if self.previous_network == AgentNetwork.BRIDGE and self.network == AgentNetwork.HOST:
            self.drop_bridge_network()
        self._isolate(role)
        self._wait_ready(role, specs)
        return self.status(role, specs)

    def _isolate(self, role: str) -> None:
        """The master network's isolation from other hosts, MAC's own (dockerfence)."""
        if role != "master":
            return
        network = f"{self.project}_{MASTER_NETWORK}"
        fence = dockerfence.install(network, self.run)
        if fence.problem:
            output.warn(
                f"{dockerfence.describe(fence, network)}. Other hosts that route "
                f"{network} through this one may reach its containers' own ports where "
                "IPv4 forwarding was on before Docker started; run `mac start master` as "
                "root on the engine's host (docs/security.md)."
            )
        else:
            output.say(dockerfence.describe(fence, network))
            self._isolate_at_boot(network)

    def _isolate_at_boot(self, network: str) -> None:
        """The rules live in the kernel only; Docker restarts the containers at boot by
        itself, so a unit puts the rules back then (maccli.systemd)."""
        if self.systemd is None and self.left_unit is not None:
            output.warn(
                f"{ISOLATION_UNIT}, installed by an earlier start, stays enabled and puts "
                "the rules back at boot; mac no longer touches systemd here (not root, or "
                "MAC_SYSTEMD=no). To have none: sudo systemctl disable "
                f"{ISOLATION_UNIT} && sudo rm {self.left_unit}"
            )
            return
        if self.systemd is None:
            output.warn(
                "At boot Docker restarts the master's containers, not MAC's rules: run "
                "`mac start master` after each boot (no systemd here, not root, or MAC_SYSTEMD=no)."
            )
            return
        host = os.environ.get("DOCKER_HOST", "")
        environment = {"DOCKER_HOST": host} if host else {}
        try:
            self.systemd.install_isolation(dockerfence.boot_command(network), environment)
        except (CliError, OSError) as exc:
            output.warn(f"the rules will not come back at boot by themselves: {_words(exc)}")
            return
        output.say(
            f"At boot:     {ISOLATION_UNIT} puts the rules back after docker.service "
            f"(systemctl status {ISOLATION_UNIT})"
        )

    def _wait_ready(self, role: str, specs: Sequence[ServiceSpec]) -> None:
        """Until each liveness URL answers (or its ready_timeout passes): as the process
        runtime does, so that the node is registered with its services answering."""
        waiting = [spec for spec in specs if spec.liveness_url]
        deadline = time.monotonic() + max((spec.ready_timeout for spec in waiting), default=0)
        with spinner(f"waiting for the {role} services to answer ..."):
            while waiting and time.monotonic() < deadline:
                waiting = [spec for spec in waiting if probe(spec.liveness_url) != "ok"]
                if waiting:
                    time.sleep(0.5)

    def stop(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        argv = self.compose(role, "down")
        tool = " ".join(self._compose or ["docker", "compose"])
        with spinner(f"{tool} -p {self.project} down ({role}) ..."):
            result = self.run(argv, env=self.compose_env(role, specs))
        if result.returncode != 0:
            raise CliError(
                f"{tool} down failed: {(result.stderr or result.stdout).strip()}",
                commands=[f"docker ps -a --filter label={PROJECT_LABEL}={self.project}"],
            )
        # A container of a profile no longer active here (a GPU removed) is this role's too.
        left = [c["Name"] for c in self._containers(specs).values()]
        if left:
            self.run(["docker", "rm", "-f", *left])
        if role == "master":
            removed = dockerfence.remove(self.run)
            if removed.problem:
                output.warn(f"MAC's {dockerfence.CHAIN} rules not removed: {removed.problem}")
            if self.systemd is not None:
                try:
                    self.systemd.remove_isolation()
                except (CliError, OSError) as exc:
                    output.warn(f"{ISOLATION_UNIT} not removed: {_words(exc)}")
        return self.status(role, specs)

    def restart(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        self._up(role, specs, "--force-recreate")
        self._isolate(role)
        self._wait_ready(role, specs)
        return self.status(role, specs)

    def logs(
        self,
        role: str,
        service: str,
        lines: int | None,
        follow: bool,
        *,
        shared: Sequence[str] = (),
    ) -> int:
        return docker_logs(service, role, lines, follow)

    def read_file(self, role: str, service: str, path: Path) -> bytes:
        result = subprocess.run(
            ["docker", "exec", f"mac-{service}", "cat", str(path)],
            capture_output=True,
            timeout=30,
            check=False,
        )
        if result.returncode != 0:
            raise OSError(result.stderr.decode(errors="replace").strip() or "docker exec failed")
        return result.stdout

    def one_off(
        self,
        argv: list[str],
        *,
        volumes: Mapping[str, Path] | None = None,
        folders: Sequence[Path] = (),
        programs: Sequence[Path] = (),
        env_names: Sequence[str] = (),
        network: bool = False,
    ) -> list[str]:
        """`docker run` of MAC's image: a volume by its Compose name (project_volume), each
        folder at its own path, each program read-only at its own, on the master's
        network when asked."""
        command = ["docker", "run", "--rm"]
        if network:
            command += ["--network", f"{self.project}_{MASTER_NETWORK}"]
        for name in env_names:
            command += ["-e", name]
        for volume, inside in (volumes or {}).items():
            command += ["-v", f"{self.project}_{volume}:{inside}"]
        for folder in folders:
            command += ["-v", f"{folder}:{folder}"]
        for program in programs:
            command += ["-v", f"{program}:{program}:ro"]
        return [*command, "--entrypoint", argv[0], self.image, *argv[1:]]

    def prune(self, unwanted: Callable[[str], bool]) -> list[str]:
        """Remove this project's containers whose service is `unwanted`: those of a
        Compose file no longer given (Compose would only warn of "orphan containers",
        and they would keep the network from being removed)."""
        listed = self.run(
            ["docker", "ps", "-a", "--filter", f"label={PROJECT_LABEL}={self.project}",
             "--format", f'{{{{.Names}}}} {{{{.Label "{SERVICE_LABEL}"}}}}'],
        )  # fmt: skip
        if listed.returncode != 0:
            return []  # no engine: nothing to remove (`up` then says what is wrong)
        rows = (line.partition(" ") for line in listed.stdout.splitlines())
        names = [name for name, _, service in rows if unwanted(service.strip())]
        if names:
            result = self.run(["docker", "rm", "-f", *names])
            if result.returncode != 0:
                raise CliError(
                    f"could not remove {', '.join(names)}: {result.stderr.strip()}",
                    commands=[f"docker rm -f {' '.join(names)}"],
                )
        return names

    def _containers(self, specs: Sequence[ServiceSpec]) -> dict[str, dict]:
        """docker inspect of this project's containers of `specs`, by service name."""
        listed = self.run(
            ["docker", "ps", "-aq", "--filter", f"label={PROJECT_LABEL}={self.project}"]
        )
        ids = listed.stdout.split() if listed.returncode == 0 else []
        if not ids:
            return {}
        inspected = self.run(["docker", "inspect", *ids])
        try:
            rows = json.loads(inspected.stdout or "[]")
        except json.JSONDecodeError:
            return {}
        wanted = {spec.name for spec in specs}
        found = {}
        for row in rows:
            service = (row.get("Config", {}).get("Labels") or {}).get(SERVICE_LABEL, "")
            if service in wanted:
                found[service] = {**row, "Name": row.get("Name", "").lstrip("/")}
        return found

    def status(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        rows = self._containers(specs)
        states = []
        for spec in specs:
            row = rows.get(spec.name)
            if row is None:
                states.append(ServiceState(spec.name, "stopped", port=spec.port))
                continue
            state = row.get("State", {})
            status = state.get("Status", "unknown")
            uptime = _since(state.get("StartedAt", "")) if status == "running" else None
            # In `docker ps`'s words: "Up (healthy)", "Up (health: starting)", "Exited (1)".
            health = (state.get("Health") or {}).get("Status", "")
            shown = "Up" if status == "running" else status.capitalize()
            if status == "exited":
                shown += f" ({state.get('ExitCode', '?')})"
            elif health:
                shown += f" (health: {health})" if health == "starting" else f" ({health})"
            states.append(
                ServiceState(
                    spec.name,
                    status,
                    pid=state.get("Pid") or None,
                    port=spec.port,
                    uptime=uptime,
                    health=probe(spec.liveness_url) if status == "running" else "-",
                    detail=f"{row['Name']}: {shown}",
                )
            )
        return states


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


def _since(stamp: str) -> float | None:
    try:
        when = datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00")
    except ValueError:
        return None
    return time.time() - when.timestamp()
