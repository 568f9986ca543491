"""The process runtime: each service a local process, supervised by supervisord.

Used where no Docker engine answers, and by the tests. It gives the guarantee that
Docker's `restart: unless-stopped` gives the containers: a service that crashes is
restarted (with backoff), its log rotates by size, and where the host boots with
systemd the role's supervisord is a unit enabled at boot (maccli.systemd). See
maccli.runtimes.supervisor for the files under `<state>/<role>/`.

`mac start` runs the set-up commands of the services it is about to start, writes
the configuration, starts (or updates) supervisord and waits until each new service
is really up: alive, answering its liveness URL, and listening on its port itself
rather than some leftover process that holds the port.

`<state>/<role>/<service>.pid` records what runs (maccli.runtimes.pidfiles); without
a supervisord, those files name what an older `mac` or a killed supervisord left
running, which status shows and stop stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import time
import xmlrpc.client
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil

from maccli.output import CliError, spinner
from maccli.runtimes.base import Runtime, ServiceSpec, ServiceState, probe
from maccli.runtimes.pidfiles import PidFiles
from maccli.runtimes.ports import check_port_free, check_port_owner
from maccli.runtimes.supervisor import (
    LOG_BACKUPS,
    LOG_MAX_BYTES,
    STATES,
    Program,
    Supervisor,
    SupervisorError,
)
from maccli.systemd import SystemdUnits

# Seconds a service without a liveness URL (celery worker, beat) must survive at start.
NO_LIVENESS_SETTLE = 2.0
_ALIVE = {"RUNNING", "STARTING", "BACKOFF"}


class ProcessRuntime(Runtime):
    name = "process"

    def __init__(
        self,
        state_dir: Path,
        *,
        grace: float = 10.0,
        poll: float = 0.2,
        systemd: SystemdUnits | None = None,
        log_max_bytes: int = LOG_MAX_BYTES,
        log_backups: int = LOG_BACKUPS,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.grace = grace
        self.poll = poll
        self.systemd = systemd
        self.log_max_bytes, self.log_backups = log_max_bytes, log_backups

    # Paths --------------------------------------------------------------------------------
    def role_dir(self, role: str) -> Path:
        return self.state_dir / role

    def pid_file(self, role: str, name: str) -> Path:
        return self.pid_files(role).path(name)

    def pid_files(self, role: str) -> PidFiles:
        return PidFiles(self.role_dir(role), role, grace=self.grace, poll=self.poll)

    def log_file(self, role: str, name: str) -> Path:
        return self.role_dir(role) / "logs" / f"{name}.log"

    def supervisor(self, role: str) -> Supervisor:
        return Supervisor(
            self.role_dir(role),
            grace=self.grace,
            log_max_bytes=self.log_max_bytes,
            log_backups=self.log_backups,
        )

    def has_state(self, role: str) -> bool:
        directory = self.role_dir(role)
        return directory.is_dir() and (
            any(directory.glob("*.pid")) or self.supervisor(role).conf.exists()
        )

    # The interface ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, role: str) -> Iterator[None]:
        """One `mac start|stop|restart` per role at a time: nothing is raced."""
        path = self.role_dir(role) / ".lock"
        with path.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                with spinner(f"Waiting for another mac command on the {role} ..."):
                    fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def start(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        directory = self.role_dir(role)
        try:
            (directory / "logs").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(
                f"cannot create the state directory {directory}: {exc}",
                hint="Run as root, or point MAC_STATE_DIR at a writable directory:",
                commands=[f"sudo mac start {role}", f"MAC_STATE_DIR=~/.mac/state mac start {role}"],
            ) from None
        with self._locked(role):
            sup = self.supervisor(role)
            supervised = sup.answers()
            if not supervised:
                self.pid_files(role).stop(specs)
            programs = sup.programs() if supervised else {}
            new = [s for s in specs if getattr(programs.get(s.name), "state", "") not in _ALIVE]
            for spec in new:
                check_port_free(role, spec)
            for spec in new:
                for command in spec.prestart:
                    self._run_prestart(role, spec, command)
            changed = sup.write(specs, _base_env())
            try:
                if not supervised:
                    self._boot(role, sup)
                elif changed:
                    sup.reload()
                for spec in new:
                    sup.start_program(spec.name)
            except (SupervisorError, OSError, xmlrpc.client.Error) as exc:
                raise CliError(
                    f"cannot start the {role}'s supervisord: {exc}",
                    commands=[f"tail -n 50 {directory / 'logs' / 'supervisord.log'}"],
                ) from None
            if new:
                self._wait_ready(role, new, sup)
        return self.status(role, specs)

    def _boot(self, role: str, sup: Supervisor) -> None:
        if self.systemd is not None:
            self.systemd.install(role, sup.command(foreground=True), sup.dir, self.grace)
            sup.wait_answering(30, sup.dir / "logs" / "supervisord.log")
        else:
            sup.spawn()

    def _env(self, spec: ServiceSpec) -> dict[str, str]:
        return {**_base_env(), **spec.env}

    def _run_prestart(self, role: str, spec: ServiceSpec, command: list[str]) -> None:
        log = self.log_file(role, spec.name)
        # What people recognise: `prepare_master`, not `python -m django prepare_master`.
        words = command
        if command[1:2] == ["-m"]:
            words = command[3:] if command[2:3] == ["django"] else command[2:]
        with spinner(f"{spec.name}: {' '.join(words[:2])}"), log.open("ab") as handle:
            handle.write(f"\n==> {' '.join(command)}\n".encode())
            handle.flush()
            try:
                result = subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    env=self._env(spec),
                    timeout=600,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise CliError(
                    f"{spec.name}: `{' '.join(command)}` could not run: {exc}",
                    commands=[f"tail -n 50 {log}"],
                ) from None
        if result.returncode != 0:
            raise CliError(
                f"{spec.name}: `{' '.join(command)}` failed (exit code {result.returncode}).",
                hint=f"Its output is in {log}:\n{_tail(log)}\nFix the cause, then run again:",
                commands=[f"tail -n 50 {log}", f"mac start {role}"],
            )

    def _wait_ready(self, role: str, specs: Sequence[ServiceSpec], sup: Supervisor) -> None:
        pending = {spec.name: spec for spec in specs}
        deadline = {spec.name: time.monotonic() + spec.ready_timeout for spec in specs}
        first_start: dict[str, float] = {}
        with spinner(f"Starting {', '.join(pending)} ..."):
            while pending:
                programs = sup.programs()
                for name, spec in list(pending.items()):
                    program = programs.get(name)
                    log = self.log_file(role, name)
                    if program is None or self._died(program, first_start):
                        # Stopped, so that it does not crash-loop behind the operator's back.
                        sup.stop_program(name)
                        code = sup.last_exit(name)
                        raise CliError(
                            f"{name} exited during start-up (exit code {code}).",
                            hint=f"Last lines of {log}:\n{_tail(log)}\nFix the cause, then:",
                            commands=[f"tail -n 50 {log}", f"mac start {role}"],
                        )
                    # STARTING: up, but not yet for supervisord's START_SECONDS.
                    if program.state not in {"RUNNING", "STARTING"}:
                        continue
                    if _service_process(program.pid) is None:
                        continue  # the launcher has not started the service yet
                    since = time.time() - program.started
                    if spec.liveness_url is None:
                        # Nothing to ask: alive for a few seconds counts as started.
                        if since >= NO_LIVENESS_SETTLE:
                            del pending[name]
                    elif probe(spec.liveness_url, 1.0) == "ok":
                        check_port_owner(role, spec, program.pid)
                        del pending[name]
                    elif time.monotonic() > deadline[name]:
                        raise CliError(
                            f"{name} started but {spec.liveness_url} did not answer within "
                            f"{spec.ready_timeout:g} s.",
                            hint=f"Last lines of {log}:\n{_tail(log)}\nThen check:",
                            commands=[f"mac status {role}", f"tail -n 50 {log}"],
                        )
                if pending:
                    time.sleep(self.poll)

    @staticmethod
    def _died(program: Program, first_start: dict[str, float]) -> bool:
        """Whether the program died since we started it (its start time changed)."""
        if program.state in {"BACKOFF", "EXITED", "FATAL", "STOPPED"}:
            return True
        if program.state in {"RUNNING", "STARTING"} and program.started:
            first = first_start.setdefault(program.name, program.started)
            return program.started != first
        return False

    def stop(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        if not self.role_dir(role).is_dir():
            return self.status(role, specs)
        with self._locked(role):
            sup = self.supervisor(role)
            if sup.answers():
                names = ", ".join(spec.name for spec in specs)
                with spinner(f"Stopping {names} ..."):
                    for spec in reversed(list(specs)):
                        sup.stop_program(spec.name)
                    if self.systemd is not None and self.systemd.installed(role):
                        self.systemd.remove(role)
                    sup.shutdown()
            elif self.systemd is not None:
                self.systemd.remove(role)
            sup.remove_files()
            self.pid_files(role).stop(specs)
        return self.status(role, specs)

    def status(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        sup = self.supervisor(role)
        if not sup.answers():
            pid_files = self.pid_files(role)
            return [pid_files.state(spec, self.log_file(role, spec.name)) for spec in specs]
        programs = sup.programs()
        states = []
        for spec in specs:
            program = programs.get(spec.name)
            log = self.log_file(role, spec.name)
            if program is None:
                states.append(ServiceState(spec.name, "stopped", port=spec.port))
                continue
            state = STATES.get(program.state, program.state.lower())
            # STARTING is up, only not yet for START_SECONDS: it counts as running.
            up = program.state in {"RUNNING", "STARTING"}
            service = _service_process(program.pid) if up else None
            if service is None:
                detail = f"log: {log}"
                if state in {"exited", "restarting"}:
                    detail = f"last exit: {sup.last_exit(spec.name)}; {detail}"
                states.append(ServiceState(spec.name, state, port=spec.port, detail=detail))
                continue
            self.pid_files(role).write(spec, service)
            try:
                uptime = max(0.0, time.time() - service.create_time())
            except psutil.Error:
                uptime = max(0.0, time.time() - program.started)
            states.append(
                ServiceState(
                    spec.name,
                    "running",
                    pid=service.pid,
                    port=spec.port,
                    uptime=uptime,
                    health=probe(spec.liveness_url),
                    detail=f"log: {log}",
                )
            )
        return states


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _service_process(launcher_pid: int) -> psutil.Process | None:
    """The service itself: the launcher's child (maccli.runtimes.launch)."""
    try:
        children = psutil.Process(launcher_pid).children()
    except psutil.Error:
        return None
    return children[0] if children else None


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join(f"  | {line}" for line in text[-lines:])
