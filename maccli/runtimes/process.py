"""The process runtime: each service a detached local process with a pid file and a log file.

Used where no Docker engine answers, and by the tests. Layout under the state dir:
    <state>/<role>/<service>.pid        {"pid": ..., "argv": [...], "started": <epoch>}
    <state>/<role>/logs/<service>.log
A pid file whose process is gone, or whose pid now belongs to another program
(created after our start, or with another command line), is stale: it is removed
and never signalled.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil

from contract.atomicfile import write_atomically
from maccli.output import CliError, spinner
from maccli.runtimes.base import Runtime, ServiceSpec, ServiceState, probe

# A reused pid belongs to a process created after our recorded start; allow clock slack.
_CREATE_SLACK = 2.0
# Seconds a service without a liveness URL (celery worker, beat) must survive at start.
NO_LIVENESS_SETTLE = 2.0


class ProcessRuntime(Runtime):
    name = "process"

    def __init__(self, state_dir: Path, *, grace: float = 10.0, poll: float = 0.2) -> None:
        self.state_dir = Path(state_dir)
        self.grace = grace
        self.poll = poll

    # Paths --------------------------------------------------------------------------------
    def role_dir(self, role: str) -> Path:
        return self.state_dir / role

    def pid_file(self, role: str, name: str) -> Path:
        return self.role_dir(role) / f"{name}.pid"

    def log_file(self, role: str, name: str) -> Path:
        return self.role_dir(role) / "logs" / f"{name}.log"

    def has_state(self, role: str) -> bool:
        directory = self.role_dir(role)
        return directory.is_dir() and any(directory.glob("*.pid"))

    # Pid files ----------------------------------------------------------------------------
    def _record(self, role: str, name: str) -> dict | None:
        path = self.pid_file(role, name)
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CliError(
                f"cannot read {path}: {exc}", commands=[f"sudo mac status {role}"]
            ) from None
        try:
            record = json.loads(text)
            if isinstance(record, int):  # a bare pid written by hand or an older mac
                record = {"pid": record}
            int(record["pid"])
        except (ValueError, KeyError, TypeError):
            return {"pid": None, "corrupt": True}
        return record

    def _live_process(self, record: dict) -> tuple[psutil.Process | None, str]:
        """(process, "") when the record's pid is still our service; (None, why) otherwise."""
        pid = record.get("pid")
        if not pid:
            return None, "stale"
        try:
            proc = psutil.Process(int(pid))
            status = proc.status()
            create_time = proc.create_time()
            cmdline = proc.cmdline()
        except psutil.NoSuchProcess:
            return None, "exited"
        except psutil.AccessDenied:
            return None, "stale"
        if status == psutil.STATUS_ZOMBIE:
            self._reap(int(pid))
            return None, "exited"
        started = record.get("started")
        if started is not None and create_time > float(started) + _CREATE_SLACK:
            return None, "stale"  # the pid was reused by a later process
        argv = record.get("argv") or []
        if argv and cmdline and not set(argv[1:]) & set(cmdline):
            return None, "stale"
        return proc, ""

    @staticmethod
    def _reap(pid: int) -> None:
        # Only our own children can be reaped; anything else is init's job.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)

    def _running(self, role: str, spec: ServiceSpec) -> tuple[psutil.Process | None, str]:
        record = self._record(role, spec.name)
        if record is None:
            return None, "stopped"
        proc, why = self._live_process(record)
        return proc, why or "running"

    # The interface ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, role: str) -> Iterator[None]:
        """One `mac start|stop|restart` per role at a time: pid files are never raced."""
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
            launched: dict[str, subprocess.Popen] = {}
            for spec in specs:
                proc, _ = self._running(role, spec)
                if proc is not None:
                    continue
                self.pid_file(role, spec.name).unlink(missing_ok=True)
                for command in spec.prestart:
                    self._run_prestart(role, spec, command)
                launched[spec.name] = self._spawn(role, spec)
            if launched:
                self._wait_ready(role, [s for s in specs if s.name in launched], launched)
        return self.status(role, specs)

    def _env(self, spec: ServiceSpec) -> dict[str, str]:
        env = dict(os.environ)
        env.update(spec.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def _run_prestart(self, role: str, spec: ServiceSpec, command: list[str]) -> None:
        log = self.log_file(role, spec.name)
        words = command[3:] if command[1:3] == ["-m", "django"] else command
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

    def _spawn(self, role: str, spec: ServiceSpec) -> subprocess.Popen:
        log = self.log_file(role, spec.name)
        with log.open("ab") as handle:
            handle.write(
                f"\n==> {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(spec.argv)}\n".encode()
            )
            handle.flush()
            started = time.time()
            try:
                popen = subprocess.Popen(
                    spec.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    env=self._env(spec),
                    # Its own session: Ctrl-C in this terminal and our exit leave it running.
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise CliError(
                    f"cannot start {spec.name} ({spec.argv[0]}): {exc}",
                    commands=["mac doctor", f"mac start {role}"],
                ) from None
        record = {"pid": popen.pid, "argv": spec.argv, "started": started}
        write_atomically(self.pid_file(role, spec.name), json.dumps(record).encode())
        return popen

    def _wait_ready(
        self, role: str, specs: Sequence[ServiceSpec], popens: dict[str, subprocess.Popen]
    ) -> None:
        pending = {spec.name: spec for spec in specs}
        started = time.monotonic()
        deadline = {spec.name: time.monotonic() + spec.ready_timeout for spec in specs}
        names = ", ".join(pending)
        with spinner(f"Starting {names} ..."):
            while pending:
                for name, spec in list(pending.items()):
                    code = popens[name].poll()
                    if code is not None:
                        self.pid_file(role, name).unlink(missing_ok=True)
                        log = self.log_file(role, name)
                        raise CliError(
                            f"{name} exited during start-up (exit code {code}).",
                            hint=f"Last lines of {log}:\n{_tail(log)}\nFix the cause, then:",
                            commands=[f"tail -n 50 {log}", f"mac start {role}"],
                        )
                    if spec.liveness_url is None:
                        # Nothing to ask: alive for a few seconds counts as started.
                        if time.monotonic() - started >= NO_LIVENESS_SETTLE:
                            del pending[name]
                    elif probe(spec.liveness_url, 1.0) == "ok":
                        del pending[name]
                    elif time.monotonic() > deadline[name]:
                        log = self.log_file(role, name)
                        raise CliError(
                            f"{name} started but {spec.liveness_url} did not answer within "
                            f"{spec.ready_timeout:g} s.",
                            hint=f"Last lines of {log}:\n{_tail(log)}\nThen check:",
                            commands=[f"mac status {role}", f"tail -n 50 {log}"],
                        )
                if pending:
                    time.sleep(self.poll)

    def stop(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        if not self.role_dir(role).is_dir():
            return self.status(role, specs)
        with self._locked(role):
            self._stop(role, specs)
        return self.status(role, specs)

    def _stop(self, role: str, specs: Sequence[ServiceSpec]) -> None:
        victims: list[tuple[ServiceSpec, psutil.Process]] = []
        for spec in reversed(list(specs)):
            proc, _ = self._running(role, spec)
            if proc is None:
                self.pid_file(role, spec.name).unlink(missing_ok=True)
                continue
            self._signal(proc, signal.SIGTERM)
            victims.append((spec, proc))
        if victims:
            with spinner(f"Stopping {', '.join(spec.name for spec, _ in victims)} ..."):
                deadline = time.monotonic() + self.grace
                for spec, proc in victims:
                    if not self._wait_gone(proc, deadline):
                        self._signal(proc, signal.SIGKILL)
                        self._wait_gone(proc, time.monotonic() + 5)
                    self.pid_file(role, spec.name).unlink(missing_ok=True)

    def _signal(self, proc: psutil.Process, sig: signal.Signals) -> None:
        # The whole session: gunicorn and celery workers die with their master.
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                proc.send_signal(sig)

    def _wait_gone(self, proc: psutil.Process, deadline: float) -> bool:
        while time.monotonic() < deadline:
            self._reap(proc.pid)
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    self._reap(proc.pid)
                    return True
            except psutil.NoSuchProcess:
                return True
            time.sleep(min(self.poll, 0.05))
        return False

    def status(self, role: str, specs: Sequence[ServiceSpec]) -> list[ServiceState]:
        states = []
        for spec in specs:
            proc, state = self._running(role, spec)
            log = self.log_file(role, spec.name)
            if proc is None:
                detail = f"log: {log}" if state in {"exited", "stale"} else ""
                states.append(ServiceState(spec.name, state, port=spec.port, detail=detail))
                continue
            try:
                uptime = max(0.0, time.time() - proc.create_time())
            except psutil.Error:
                uptime = time.time() - self.pid_file(role, spec.name).stat().st_mtime
            states.append(
                ServiceState(
                    spec.name,
                    "running",
                    pid=proc.pid,
                    port=spec.port,
                    uptime=uptime,
                    health=probe(spec.liveness_url),
                    detail=f"log: {log}",
                )
            )
        return states


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join(f"  | {line}" for line in text[-lines:])
