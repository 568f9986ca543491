"""The pid files of the process runtime: `<state>/<role>/<service>.pid`.

Each records what runs: {"pid": ..., "argv": [...], "started": <epoch>, "pgid": ...},
written by `mac start` and `mac status` from what supervisord reports. They matter on
their own when no supervisord answers: services left by an older `mac` (one detached
process per service, in a session of its own) or by a supervisord that was killed.
Those are still shown by `mac status` and stopped by `mac stop`, with their whole
process group. A pid file whose process is gone, or whose pid now belongs to another
program (created after our start, or with another command line), is stale: it is
removed and its pid never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from contract.atomicfile import write_atomically
from maccli.output import CliError, spinner
from maccli.runtimes.base import ServiceSpec, ServiceState, service_health

# A reused pid belongs to a process created after our recorded start; allow clock slack.
_CREATE_SLACK = 2.0


class PidFiles:
    """The pid files of one role's folder."""

    def __init__(self, role_dir: Path, role: str, *, grace: float, poll: float) -> None:
        self.dir = Path(role_dir)
        self.role = role
        self.grace = grace
        self.poll = poll

    def path(self, name: str) -> Path:
        return self.dir / f"{name}.pid"

    def record(self, name: str) -> dict | None:
        path = self.path(name)
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CliError(
                f"cannot read {path}: {exc}", commands=[f"sudo mac status {self.role}"]
            ) from None
        try:
            record = json.loads(text)
            if isinstance(record, int):  # a bare pid written by hand or an older mac
                record = {"pid": record}
            int(record["pid"])
        except (ValueError, KeyError, TypeError):
            return {"pid": None, "corrupt": True}
        return record

    def write(self, spec: ServiceSpec, proc: psutil.Process) -> None:
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            record = {
                "pid": proc.pid,
                "argv": spec.argv,
                "started": proc.create_time(),
                "pgid": os.getpgid(proc.pid),
            }
            write_atomically(self.path(spec.name), json.dumps(record).encode())

    def live_process(self, record: dict) -> tuple[psutil.Process | None, str]:
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
            _reap(int(pid))
            return None, "exited"
        started = record.get("started")
        if started is not None and create_time > float(started) + _CREATE_SLACK:
            return None, "stale"  # the pid was reused by a later process
        argv = record.get("argv") or []
        if argv and cmdline and not set(argv[1:]) & set(cmdline):
            return None, "stale"
        return proc, ""

    def state(self, spec: ServiceSpec, log: Path) -> ServiceState:
        """The service as its pid file tells, with no supervisord to ask."""
        record = self.record(spec.name)
        if record is None:
            return ServiceState(spec.name, "stopped", port=spec.port)
        proc, why = self.live_process(record)
        if proc is None:
            return ServiceState(spec.name, why, port=spec.port, detail=f"log: {log}")
        try:
            uptime: float | None = max(0.0, time.time() - proc.create_time())
        except psutil.Error:
            uptime = None
        return ServiceState(
            spec.name,
            "running",
            pid=proc.pid,
            port=spec.port,
            uptime=uptime,
            health=service_health(spec),
            detail=f"not supervised (run `mac restart {self.role}`); log: {log}",
        )

    def stop(self, specs: Sequence[ServiceSpec]) -> None:
        """Stop what the pid files name (SIGTERM, SIGKILL after the grace), group and all."""
        victims: list[tuple[ServiceSpec, psutil.Process, int | None]] = []
        for spec in reversed(list(specs)):
            record = self.record(spec.name)
            if record is None:
                continue
            proc, why = self.live_process(record)
            if proc is not None:
                group = _group_of(proc.pid)
                _signal(proc.pid, group, signal.SIGTERM)
                victims.append((spec, proc, group))
            elif why == "exited":
                # The service is gone, but its group may live on: a gunicorn master's
                # orphaned workers. The kernel never hands out a pid still in use as a
                # process group id, so a group of that id with no leader is ours.
                group = record.get("pgid") or record.get("pid")
                if group and not psutil.pid_exists(int(group)):
                    _kill_group(int(group), signal.SIGKILL)
            self.path(spec.name).unlink(missing_ok=True)
        if victims:
            with spinner(f"Stopping {', '.join(spec.name for spec, _, _ in victims)} ..."):
                deadline = time.monotonic() + self.grace
                for _spec, proc, group in victims:
                    if not self._wait_gone(proc, deadline):
                        _signal(proc.pid, group, signal.SIGKILL)
                        self._wait_gone(proc, time.monotonic() + 5)
                    if group:
                        _kill_group(group, signal.SIGKILL)

    def _wait_gone(self, proc: psutil.Process, deadline: float) -> bool:
        while time.monotonic() < deadline:
            _reap(proc.pid)
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    _reap(proc.pid)
                    return True
            except psutil.NoSuchProcess:
                return True
            time.sleep(min(self.poll, 0.05))
        return False


def _reap(pid: int) -> None:
    # Only our own children can be reaped; anything else is init's job.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _group_of(pid: int) -> int | None:
    """The process group to signal with a service: never our own (mac's) group."""
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return None
    return None if group == os.getpgrp() else group


def _kill_group(group: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal(pid: int, group: int | None, sig: signal.Signals) -> None:
    # The whole group: gunicorn and celery workers die with their master.
    if group is None or not _kill_group(group, sig):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
