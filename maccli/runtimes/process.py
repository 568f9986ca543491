"""The process runtime: each service a local process, supervised by supervisord.

Used where no Docker engine answers, and by the tests. It gives the guarantee that
Docker's `restart: unless-stopped` gives the containers: a service that crashes is
restarted (with backoff), its log rotates by size, and where the host boots with
systemd the role's supervisord is a unit enabled at boot (maccli.systemd). See
maccli.runtimes.supervisor for the files under `<state>/<role>/`.

`mac start` runs the set-up commands of the services it is about to start, writes
the configuration, starts (or updates) supervisord and waits until every service of
the role is really up: alive, answering its own health check (liveness URL, or
health command), and listening on its port itself rather than some leftover process
that holds the port. That includes the services that were already running: one that
died a moment ago is still RUNNING for supervisord while its launcher clears its
leftovers, and `mac start` waits for it to be back and answering instead of saying
"started" over a dead API (issue 19, D2). `mac status` likewise reports `running`
only with a live service process, and its health only from its own answer (D3).

`<state>/<role>/<service>.pid` records what runs (maccli.runtimes.pidfiles); without
a supervisord, those files name what an older `mac` or a killed supervisord left
running, which status shows and stop stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import time
import xmlrpc.client
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import psutil
from rich.text import Text

from maccli.output import CliError, err, spinner, warn
from maccli.runtimes.base import (
    Runtime,
    ServiceSpec,
    ServiceState,
    not_answering,
    service_health,
)
from maccli.runtimes.logfiles import file_logs
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


# Services that the Docker master runs and the process runtime takes from the host.
HOST_SERVICES = {"redis": "redis-server"}


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

    def logs(
        self,
        role: str,
        service: str,
        lines: int | None,
        follow: bool,
        *,
        shared: Sequence[str] = (),
    ) -> int:
        if service in HOST_SERVICES:
            raise CliError(
                f"{service} is not run by mac under the process runtime: the master uses "
                f"the host's {HOST_SERVICES[service]}, which logs to the system journal.",
                hint="Read it there (or, if the master runs in Docker, add --runtime docker):",
                commands=[
                    f"journalctl -u {HOST_SERVICES[service]} -n 50",
                    f"mac logs {service} --runtime docker",
                ],
            )
        path = self.log_file(role, service)
        if not path.exists():
            others = (self.log_file(role, name) for name in shared)
            path = next((other for other in others if other.exists()), path)
        return file_logs(path, service, role, lines, follow)

    def read_file(self, role: str, service: str, path: Path) -> bytes:
        return Path(path).read_bytes()  # the services' files are this host's

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
            self._prepare(role, new)
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
            self._wait_ready(role, specs, sup, {spec.name for spec in new})
        return self.status(role, specs)

    def _boot(self, role: str, sup: Supervisor) -> None:
        if self.systemd is not None:
            if role == "master":
                # A Docker master's boot-time rules (maccli.systemd) have no network to
                # guard now: left enabled, the unit would fail at every boot.
                self.systemd.remove_isolation()
            self.systemd.install(role, sup.command(foreground=True), sup.dir, self.grace)
            sup.wait_answering(30, sup.dir / "logs" / "supervisord.log")
        else:
            sup.spawn()

    def _env(self, spec: ServiceSpec) -> dict[str, str]:
        return {**_base_env(), **spec.env}

    def _prepare(self, role: str, specs: Sequence[ServiceSpec]) -> None:
        """Each service's commands in order; those of different services side by side,
        but after the services each names in `prestart_after`. The first failure, in the
        services' order, is the one reported; a service that needs it never begins."""
        preparing = [spec for spec in specs if spec.prestart]
        if not preparing:
            return
        names = ", ".join(spec.name for spec in preparing)
        with spinner(f"Preparing {names} ..."), ThreadPoolExecutor(len(preparing)) as pool:
            started: dict[str, Future] = {}
            for spec in preparing:
                before = [started[name] for name in spec.prestart_after if name in started]
                started[spec.name] = pool.submit(self._prepare_one, role, spec, before)
            for future in started.values():
                future.result()  # the first failure, in order

    def _prepare_one(self, role: str, spec: ServiceSpec, before: list[Future]) -> None:
        for future in before:
            future.result()  # a failure there is this service's too: it never begins
        for command in spec.prestart:
            self._run_prestart(role, spec, command)

    def _run_prestart(self, role: str, spec: ServiceSpec, command: list[str]) -> None:
        log = self.log_file(role, spec.name)
        # What people recognise: `prepare_master`, not `python -m django prepare_master`.
        words = command
        if words[:1] == ["env"]:  # `env NAME=VALUE ... program`: the program's words
            words = [word for word in words[1:] if "=" not in word]
        if words[1:2] == ["-m"]:
            words = words[3:] if words[2:3] == ["django"] else words[2:]
        # Above the spinner, as each step begins (several services' at once).
        err().print(Text(f"  {spec.name}: {words[0]}"))
        with log.open("ab") as handle:
            handle.write(f"\n==> {' '.join(command)}\n".encode())
            handle.flush()
            began = handle.tell()
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
        # A step that went through may still have a warning for the person starting it
        # (migrate prints Django's system-check warnings, e.g. inventory.W001).
        for warning in check_warnings(_read_from(log, began)):
            warn(f"{spec.name}: {warning}")

    def _wait_ready(
        self, role: str, specs: Sequence[ServiceSpec], sup: Supervisor, started: set[str]
    ) -> None:
        """Wait until every service answers its own health check.

        `started` are the services this command started: one of them that dies is a
        failed start (stopped again, its log shown). The others were running already;
        one of them that is restarting (killed a moment ago) is waited for, as long as
        supervisord is bringing it back.
        """
        # A ready_timeout of 0 (MAC_START_TIMEOUT=0): that service is not waited for at all.
        pending = {spec.name: spec for spec in specs if spec.ready_timeout > 0}
        if not pending:
            return
        deadline = {spec.name: time.monotonic() + spec.ready_timeout for spec in specs}
        first_start: dict[str, float] = {}
        last_word = {spec.name: "not started yet" for spec in specs}
        with spinner(f"Waiting for {', '.join(pending)} to answer ..."):
            while pending:
                programs = sup.programs()
                for name, spec in list(pending.items()):
                    program = programs.get(name)
                    log = self.log_file(role, name)
                    if name in started and (program is None or self._died(program, first_start)):
                        # Stopped, so that it does not crash-loop behind the operator's back.
                        sup.stop_program(name)
                        code = sup.last_exit(name)
                        raise CliError(
                            f"{name} exited during start-up (exit code {code}).",
                            hint=f"Last lines of {log}:\n{_tail(log)}\nFix the cause, then:",
                            commands=[f"tail -n 50 {log}", f"mac start {role}"],
                        )
                    if program is None or program.state in {"FATAL", "STOPPED"}:
                        raise CliError(
                            f"{name} is not running and supervisord does not restart it "
                            f"(last exit: {sup.last_exit(name)}).",
                            hint=f"Last lines of {log}:\n{_tail(log)}\nThen:",
                            commands=[f"tail -n 50 {log}", f"mac restart {role}"],
                        )
                    if self._ready(spec, program, last_word):
                        check_port_owner(role, spec, program.pid)
                        del pending[name]
                    elif time.monotonic() > deadline[name]:
                        raise not_answering(
                            [(spec, last_word[name])],
                            hint=f"Last lines of {log}:\n{_tail(log)}\nThen check:",
                            commands=[f"mac status {role}", f"tail -n 50 {log}"],
                        )
                if pending:
                    time.sleep(self.poll)

    @staticmethod
    def _ready(spec: ServiceSpec, program: Program, last_word: dict[str, str]) -> bool:
        """Whether the program's service process is up and answers its own health check."""
        # STARTING: up, but not yet for supervisord's START_SECONDS.
        if program.state not in {"RUNNING", "STARTING"}:
            last_word[spec.name] = f"supervisord says {STATES.get(program.state, program.state)}"
            return False
        service = _service_process(program.pid)
        if service is None:
            last_word[spec.name] = "its process is not running (yet)"
            return False
        if spec.liveness_url is None and not spec.health_command:
            # Nothing to ask: alive for a few seconds counts as started.
            try:
                alive_for = time.time() - service.create_time()
            except psutil.Error:
                return False
            last_word[spec.name] = f"alive for {alive_for:.0f} s"
            return alive_for >= NO_LIVENESS_SETTLE
        word = service_health(spec, timeout=1.0)
        last_word[spec.name] = word
        return word == "ok"

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

    def stop_services(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        """Each program through supervisord, which keeps running with the others; without
        one, what the services' pid files name."""
        if not self.role_dir(role).is_dir():
            return self.status(role, specs)
        with self._locked(role):
            sup = self.supervisor(role)
            if not sup.answers():
                self.pid_files(role).stop(specs)
                return self.status(role, specs)
            with spinner(f"Stopping {', '.join(spec.name for spec in specs)} ..."):
                try:
                    for spec in reversed(list(specs)):
                        sup.stop_program(spec.name)
                except (OSError, xmlrpc.client.Error) as exc:
                    raise _unanswered(role, self.role_dir(role), exc) from None
        return self.status(role, specs)

    def start_services(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        """The programs supervisord has of them; its configuration stays as `mac start`
        wrote it."""
        if not self.role_dir(role).is_dir():
            return self.status(role, specs)
        with self._locked(role):
            sup = self.supervisor(role)
            if not sup.answers():
                # Stopped through their pid files (stop_services without supervisord): only
                # a start of the whole role brings them back.
                raise CliError(
                    f"the {role}'s supervisord does not answer: "
                    f"{', '.join(spec.name for spec in specs)} not started again.",
                    commands=[f"mac restart {role}", f"mac status {role}"],
                )
            try:
                programs = sup.programs()
                here = [spec for spec in specs if spec.name in programs]
                for spec in here:
                    sup.start_program(spec.name)
            except (OSError, xmlrpc.client.Error) as exc:
                raise _unanswered(role, self.role_dir(role), exc) from None
            self._wait_ready(role, here, sup, {spec.name for spec in here})
        return self.status(role, specs)

    def status(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        sup = self.supervisor(role)
        if not sup.answers():
            pid_files = self.pid_files(role)
            return [pid_files.state(spec, self.log_file(role, spec.name)) for spec in specs]
        programs = sup.programs()
        states: list[ServiceState] = []
        asks: list[tuple[ServiceState, ServiceSpec]] = []
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
                if program.state == "STARTING":
                    state = "starting"  # the launcher has not started the service yet
                elif up:
                    # supervisord still sees the launcher, which is clearing what the dead
                    # service left behind; supervisord restarts it next (issue 19, D3).
                    state = "restarting"
                    detail = f"its process is gone; supervisord restarts it; {detail}"
                elif state in {"exited", "restarting"}:
                    detail = f"last exit: {sup.last_exit(spec.name)}; {detail}"
                states.append(ServiceState(spec.name, state, port=spec.port, detail=detail))
                continue
            self.pid_files(role).write(spec, service)
            try:
                uptime = max(0.0, time.time() - service.create_time())
            except psutil.Error:
                uptime = max(0.0, time.time() - program.started)
            state_row = ServiceState(
                spec.name,
                "running",
                pid=service.pid,
                port=spec.port,
                uptime=uptime,
                detail=f"log: {log}",
            )
            states.append(state_row)
            asks.append((state_row, spec))
        # Each service's own answer, asked of all at once (a Celery ping takes a second).
        if asks:
            with ThreadPoolExecutor(max_workers=len(asks)) as pool:
                words = list(pool.map(lambda ask: service_health(ask[1]), asks))
            for (state_row, _spec), word in zip(asks, words, strict=True):
                state_row.health = word
        return states


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _service_process(launcher_pid: int) -> psutil.Process | None:
    """The service itself: the launcher's live child (maccli.runtimes.launch)."""
    try:
        children = psutil.Process(launcher_pid).children()
        if children and children[0].status() != psutil.STATUS_ZOMBIE:
            return children[0]
    except psutil.Error:
        pass
    return None


# Django's system-check warning as its commands print it: "?: (inventory.W001) text",
# then "\tHINT: text" on the next line.
_CHECK_WARNING = re.compile(
    r"^\S*: \((?P<id>[\w.]+\.W\d+)\) (?P<msg>.*)(?:\n\s+HINT: (?P<hint>.*))?", re.M
)


def check_warnings(output: str) -> list[str]:
    """Django's system-check warnings in a command's output: "<id>: <text> <hint>"."""
    return [
        f"{m['id']}: {m['msg']}" + (f" {m['hint']}" if m["hint"] else "")
        for m in _CHECK_WARNING.finditer(output)
    ]


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join(f"  | {line}" for line in text[-lines:])


def _unanswered(role: str, directory: Path, exc: Exception) -> CliError:
    return CliError(
        f"the {role}'s supervisord did not answer: {exc}",
        hint="Its log says why; `mac restart` brings every service back:",
        commands=[f"tail -n 50 {directory / 'logs' / 'supervisord.log'}", f"mac restart {role}"],
    )
