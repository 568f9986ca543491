"""The one interface both runtimes implement, and the shapes they exchange."""

from __future__ import annotations

import os
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from contract.liveness import check_url, outcome_words


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


class Runtime(ABC):
    """Starts, stops and reports the services of one role."""

    name: str = ""

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

    def has_state(self, role: str) -> bool:
        """Whether this runtime already runs (or ran) the role here."""
        return False
