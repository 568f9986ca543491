"""The one interface both runtimes implement, and the shapes they exchange."""

from __future__ import annotations

import os
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from contract.liveness import check_url, outcome_words
from contract.services import AgentNetwork
from maccli.output import CliError


@dataclass
class ServiceSpec:
    """One service of a role ("agent" or "master") as a runtime needs to know it."""

    name: str
    argv: list[str]  # the command line under the process runtime
    port: int | None = None
    liveness_path: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # Commands run to completion before the service starts (migrations, config files).
    prestart: list[list[str]] = field(default_factory=list)
    # Services (listed before this one) whose commands must have finished before this
    # one's begin; the process runtime runs the others' side by side.
    prestart_after: tuple[str, ...] = ()
    ready_timeout: float = 30.0
    # How the liveness URL is reached from this host.
    host: str = "127.0.0.1"
    # The address the service listens on ("" or a wildcard: every address).
    bind: str = ""
    # A service without a liveness URL may name a command that exits 0 while it works
    # (the Celery worker answers a ping through the broker).
    health_command: list[str] | None = None

    @property
    def liveness_url(self) -> str | None:
        if self.port is None or self.liveness_path is None:
            return None
        return f"http://{self.host}:{self.port}{self.liveness_path}"


@dataclass
class ServiceState:
    name: str
    state: str  # running | stopped | exited | stale | <docker's state>
    pid: int | None = None
    port: int | None = None
    uptime: float | None = None
    health: str = "-"  # ok | failing (<why>) | -
    detail: str = ""

    @property
    def running(self) -> bool:
        return self.state == "running"


def probe(url: str | None, timeout: float = 2.0) -> str:
    """How the liveness URL answers: "ok", "HTTP 503", "timeout", "refused"...; '-' without one.

    Judged by the master's own probe code, so `mac status` and the sweep agree.
    """
    if url is None:
        return "-"
    parts = urlsplit(url)
    return outcome_words(check_url(parts.hostname or "", parts.port or 80, parts.path, timeout))


def command_health(argv: list[str], env: dict[str, str], timeout: float = 15.0) -> str:
    """`ok` when the command exits 0, else its last line of output (why it failed)."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return f"cannot run {argv[0]}: {exc.strerror or exc}"
    if done.returncode == 0:
        return "ok"
    lines = (done.stderr or done.stdout).strip().splitlines()
    return (lines[-1] if lines else f"exit code {done.returncode}")[:80]


def service_health(spec: ServiceSpec, timeout: float = 2.0) -> str:
    """The service's own answer: its liveness URL, else its health command, else '-'."""
    if spec.liveness_url is not None:
        return probe(spec.liveness_url, timeout)
    if spec.health_command:
        return command_health(spec.health_command, spec.env)
    return "-"


def not_answering(
    late: Sequence[tuple[ServiceSpec, str]], *, hint: str, commands: Sequence[str]
) -> CliError:
    """A start whose services still do not answer at their deadline, in the same words
    under every runtime: each service, what it was asked, and its last answer."""
    said = "; ".join(
        f"{spec.name} does not answer {spec.liveness_url or 'its health check'} after "
        f"{spec.ready_timeout:g} s: {word}"
        for spec, word in late
    )
    return CliError(f"{said}.", hint=hint, commands=commands)


class Runtime(ABC):
    """Starts, stops and reports the services of one role, and does for `mac` what
    depends on where they run (logs, files and one-off tools beside them, the agent's
    network mode), so that no command asks which runtime it has."""

    name: str = ""
    # Whether the role's services run on a network of their own (Compose's), reaching
    # each other by service name; else on this host, over its loopback.
    own_network: bool = False
    # The agent's network modes this runtime can run (contract AgentNetwork), and the one
    # chosen for this command (None: the runtime has no choice to make).
    network_modes: tuple[AgentNetwork, ...] = (AgentNetwork.HOST,)
    network: AgentNetwork | None = None

    @abstractmethod
    def start(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        """Start what is not running (idempotent); raise CliError on failure."""

    @abstractmethod
    def stop(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        """Stop every service of the role; stopping a stopped service is fine."""

    @abstractmethod
    def status(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        """The state of each service, with health from its liveness URL."""

    def restart(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        self.stop(role, specs)
        return self.start(role, specs)

    @abstractmethod
    def stop_services(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        """Stop only these services of the role, leaving its others running (`mac gpu
        reset` stops the GPU's holders, never the node); a stopped one is fine. Their
        states after, with every service stopped alongside where several share one."""

    @abstractmethod
    def start_services(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        """Start again what stop_services stopped, and wait until it answers; a service
        the role never ran here (no container, no program of it) is left as it is."""

    def has_state(self, role: str) -> bool:
        """Whether this runtime already runs (or ran) the role here."""
        return False

    @abstractmethod
    def logs(
        self,
        role: str,
        service: str,
        lines: int | None,
        follow: bool,
        *,
        shared: Sequence[str] = (),
    ) -> int:
        """Print what `service` printed (its last `lines`, then what follows with `follow`);
        the exit code of `mac logs`. `shared`: the processes whose log may hold its lines
        where it shares one with others."""

    @abstractmethod
    def read_file(self, role: str, service: str, path: Path) -> bytes:
        """The file at `path` as `service` sees it. Raises OSError when it cannot be read."""

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
        """The command line that runs `argv` once beside the role's services, seeing what
        they see: `volumes` (a runtime's named volume: where the services have it) and
        this host's `folders` at their own paths, its `programs` read-only at theirs, the
        environment's `env_names`, and on `network` the services' own network. On this
        host, `argv` itself."""
        return list(argv)

    def running_network(self, specs: Sequence[ServiceSpec]) -> AgentNetwork | None:
        """The agent's network mode its services run in now; None when none run, or when
        the runtime knows one mode only."""
        return None

    def use_network(self, mode: AgentNetwork, running: AgentNetwork | None = None) -> None:
        """Run the agent in `mode`; `running` is the mode it ran in before this command."""
        self.network = mode

    def pass_values(self, values: Mapping[str, str]) -> None:
        """Values the services' definitions take from `mac` itself rather than from their
        specs (Compose's ${NAME}); a runtime whose specs carry everything needs none."""
        return None

    def use_profiles(self, names: Sequence[str]) -> bool:
        """Run only the optional services of the profiles `names` (a GPU exporter's
        container needs its vendor's devices). False where every service runs anyway
        (a process reports a missing backend in a gauge)."""
        return False

    def use_files(self, paths: Sequence[Path]) -> None:
        """Read the role's service definitions from these files, written from its specs
        for this start (the master's Compose files), in place of the shipped ones; a
        runtime that runs the specs themselves needs none."""
        return None

    def prune(self, unwanted: Callable[[str], bool]) -> list[str]:
        """Remove what runs of the `unwanted` services (those of a setting no longer given);
        their names."""
        return []
