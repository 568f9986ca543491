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
a GPU profile whose plumbing is missing is left out (maccli.runtimes.dockergpu), and
containers named mac-* that belong to another Compose project (a raw `docker compose up`
elsewhere, project "deploy") are found, because Docker would otherwise stop with a bare
`Conflict. The container name "/mac-..." is already in use`. After it, `start` waits
until each service answers, and fails naming those that do not.

An engine that does not answer is said as such by every command, never taken for
"no containers" (every service "stopped") nor shown as Compose's own traceback.
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
from maccli.runtimes import dockerfence, dockergpu
from maccli.runtimes.base import Runtime, ServiceSpec, ServiceState, not_answering, probe
from maccli.runtimes.dockerengine import (
    compose_errors,
    conflict_error,
    engine_error,
    find_compose,
    mac_containers,
    stale_error,
)
from maccli.runtimes.dockerimage import DEFAULT_IMAGE, ImageError, build_image, image_exists
from maccli.runtimes.dockerimage import source_root as image_source
from maccli.runtimes.dockerlogs import docker_logs
from maccli.systemd import ISOLATION_UNIT, SystemdUnits
from node.checks.docker import COMPOSE_PROJECT, describe_stale
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
        # Compose profiles of optional services (nvidia: dcgm-exporter, amd: rocm-exporter),
        # and the services of those this start left out (their GPU plumbing is missing).
        self.profiles = list(profiles or [])
        self.left_out: set[str] = set()
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
        found = mac_containers(self.run)
        stale = [c for c in found if c.project != self.project]
        if not stale:
            return
        if not self.remove_stale:
            raise stale_error(role, stale, ours=len(stale) < len(found))
        names = [c.name for c in stale]
        result = self.run(["docker", "rm", "-f", *names])
        if result.returncode != 0:
            raise CliError(
                f"could not remove {describe_stale(stale)}: {result.stderr.strip()}",
                commands=[f"docker rm -f {' '.join(names)}"],
            )

    def _leave_out(self, role: str, item: dockergpu.LeftOut) -> None:
        """Run without a GPU profile this node cannot run now, and say how to add it."""
        services = dockergpu.profile_services(self.compose_files(role), item.profile)
        self.profiles = [name for name in self.profiles if name != item.profile]
        self.left_out.update(services)
        output.warn(dockergpu.warning(services, item))

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
        roots = NodeConfig.load().roots()
        for item in dockergpu.left_out(self.profiles, self.run, roots):
            self._leave_out(role, item)
        self._ensure_image()
        result = self._compose_up(role, specs, extra)
        said = (result.stderr or result.stdout).strip()
        refused = result.returncode != 0 and dockergpu.NVIDIA_REFUSED in said
        if refused and "nvidia" in self.profiles:
            self._leave_out(role, dockergpu.nvidia_refused(compose_errors(said, 1)))
            self.prune(lambda service: service in self.left_out)  # created, never started
            result = self._compose_up(role, specs, extra)
            said = (result.stderr or result.stdout).strip()
        if result.returncode != 0:
            if "Conflict" in said and "already in use" in said:
                conflict = conflict_error(self.run, self.project, role, said)
                if conflict is not None:
                    raise conflict
            tool = " ".join(self._compose or ["docker", "compose"])
            raise CliError(
                f"{tool} up failed: {compose_errors(said, result.returncode)}",
                commands=[
                    " ".join(self.compose(role, "logs", "--tail", "50")),
                    f"mac start {role}",
                ],
            )

    def _compose_up(
        self, role: str, specs: Sequence[ServiceSpec], extra: Sequence[str]
    ) -> CommandResult:
        argv = self.compose(role, "up", "-d", "--no-build", *extra)
        tool = " ".join(self._compose or ["docker", "compose"])
        with spinner(f"{tool} -p {self.project} up -d ({role}) ..."):
            return self.run(argv, env=self.compose_env(role, specs))

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
        """Until each liveness URL answers, within its ready_timeout (MAC_START_TIMEOUT;
        0: not waited for), as the process runtime does: `mac start` says ok, and the
        node registers, only with its services answering. Those still silent at their
        deadline fail the start, by name, with their containers' logs as the next step;
        the containers stay (Docker keeps restarting them), so the logs are there."""
        began = time.monotonic()
        waiting = {
            spec.name: spec
            for spec in specs
            if spec.liveness_url and spec.ready_timeout > 0 and spec.name not in self.left_out
        }
        words: dict[str, str] = {}
        late: list[ServiceSpec] = []
        with spinner(f"waiting for the {role} services to answer ..."):
            while waiting:
                for name, spec in list(waiting.items()):
                    words[name] = probe(spec.liveness_url)
                    if words[name] == "ok":
                        del waiting[name]
                    elif time.monotonic() - began > spec.ready_timeout:
                        late.append(waiting.pop(name))
                if waiting:
                    time.sleep(0.5)
        if late:
            rows = self._containers(late)
            raise not_answering(
                [(spec, _with_container(words[spec.name], spec, rows)) for spec in late],
                hint="Their containers' last lines say why (Docker keeps restarting them). "
                "Fix the cause, then check:",
                commands=[
                    *(f"docker logs mac-{spec.name} --tail 50" for spec in late),
                    f"mac status {role}",
                ],
            )

    def stop(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        # The engine first: with none, Compose 1.29 prints a Python traceback.
        mac_containers(self.run)
        argv = self.compose(role, "down")
        tool = " ".join(self._compose or ["docker", "compose"])
        with spinner(f"{tool} -p {self.project} down ({role}) ..."):
            result = self.run(argv, env=self.compose_env(role, specs))
        if result.returncode != 0:
            said = (result.stderr or result.stdout).strip()
            raise CliError(
                f"{tool} down failed: {compose_errors(said, result.returncode)}",
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

    def stop_services(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        """`docker stop` of their containers: kept, and left stopped by Docker's
        `restart: unless-stopped` until start_services."""
        rows = self._containers(specs)
        self._engine_command(role, "stop", [rows[spec.name] for spec in specs if spec.name in rows])
        return self.status(role, specs)

    def start_services(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        """`docker start` of their containers as they are (no Compose: nothing is
        recreated), then each answers within its ready_timeout."""
        rows = self._containers(specs)
        here = [spec for spec in specs if spec.name in rows]
        self._engine_command(role, "start", [rows[spec.name] for spec in here])
        self._wait_ready(role, here)
        return self.status(role, specs)

    def _engine_command(self, role: str, verb: str, rows: Sequence[dict]) -> None:
        if not rows:
            return
        argv = ["docker", verb, *(row["Name"] for row in rows)]
        with spinner(f"{' '.join(argv)} ..."):
            result = self.run(argv)
        if result.returncode != 0:
            said = (result.stderr or result.stdout).strip() or f"exit code {result.returncode}"
            raise CliError(
                f"{' '.join(argv)} failed: {said}",
                commands=[
                    f"docker ps -a --filter label={PROJECT_LABEL}={self.project}",
                    f"mac restart {role}",
                ],
            )

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
        """docker inspect of this project's containers of `specs`, by service name.

        An engine that does not answer is an error: "no containers" would show every
        service as stopped, and send the operator to start a second copy."""
        listed = self.run(
            ["docker", "ps", "-aq", "--filter", f"label={PROJECT_LABEL}={self.project}"]
        )
        if listed.returncode != 0:
            raise engine_error(f"{listed.stderr}\n{listed.stdout}")
        ids = listed.stdout.split()
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


def _with_container(word: str, spec: ServiceSpec, rows: Mapping[str, dict]) -> str:
    """A service's last answer, and its container's state where it is not running."""
    row = rows.get(spec.name)
    if row is None:
        return f"{word} (no container mac-{spec.name})"
    state = row.get("State", {})
    if state.get("Status") == "running":
        return word
    status, code = state.get("Status", "unknown"), state.get("ExitCode", "?")
    return f"{word} ({row['Name']}: {status}, exit code {code})"


def _since(stamp: str) -> float | None:
    try:
        when = datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00")
    except ValueError:
        return None
    return time.time() - when.timestamp()
