"""supervisord under the process runtime: one per role, restarting what crashes.

Why supervisord (PyPI `supervisor`, also Debian's `supervisor`): it is the well-kept
answer to "restart on crash with backoff, rotate the logs by size, tell me each
program's state", it runs as root or as any user, in containers and on hosts without
systemd, and it is a pure-Python dependency of `mac`. Where the host boots with
systemd, one unit per role runs this same supervisord at boot (maccli.systemd), so
the process runtime behaves alike on every host. docs/operations.md says more.

Layout under `<state>/<role>/`:
    supervisor/supervisord.conf     written by `mac start` from the role's ServiceSpecs
    supervisor/supervisord.sock     its XML-RPC socket (mode 0700: root or the owner only;
                                    under /tmp when the path is too long for a socket)
    supervisor/supervisord.pid
    supervisor/<service>.json       argv and environment of each service (launch.py)
    logs/<service>.log          the service's output, rotated at MAC_LOG_MAX_BYTES
    logs/supervisord.log        supervisord's own log: starts, exits, restarts
"""

from __future__ import annotations

import configparser
import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import xmlrpc.client
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contract.atomicfile import write_atomically
from maccli.runtimes.base import ServiceSpec

# How supervisord restarts: a service that dies within START_SECONDS of its start is
# retried after 1 s, then 2 s, 3 s... (supervisord's backoff); one that ran longer is
# restarted at once. Ten seconds, as Docker's restart policy counts a container that
# ran 10 s as started: a crash loop whose every start takes a few seconds to fail
# still backs off. After RESTART_RETRIES failed starts in a row (days of retrying)
# supervisord gives up and `mac status` shows it "exited".
START_SECONDS = 10
RESTART_RETRIES = 1000
LOG_MAX_BYTES = 10 * 1024 * 1024
LOG_BACKUPS = 5

# supervisord's process states (supervisor.states.ProcessStates) as `mac status` words.
STATES = {
    "RUNNING": "running",
    "STARTING": "starting",
    "BACKOFF": "restarting",
    "STOPPING": "stopping",
    "STOPPED": "stopped",
    "EXITED": "exited",
    "FATAL": "exited",
    "UNKNOWN": "stale",
}


_SOCKET_PATH_MAX = 100


class SupervisorError(RuntimeError):
    """supervisord could not be started or did not answer."""


@dataclass
class Program:
    """One program as supervisord reports it."""

    name: str
    state: str  # supervisord's state name: RUNNING, BACKOFF, ...
    pid: int
    started: float
    exitstatus: int
    spawnerr: str


class _UnixTransport(xmlrpc.client.Transport):
    """XML-RPC over supervisord's unix socket (what supervisorctl does)."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__()
        self.path, self.timeout = str(path), timeout

    def make_connection(self, host):  # xmlrpc's signature
        import http.client

        path, timeout = self.path, self.timeout

        class Connection(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout)
                self.sock.connect(path)

        return Connection("localhost", timeout=timeout)


class Supervisor:
    """The supervisord of one role: its files, its start, and its XML-RPC interface."""

    def __init__(
        self,
        role_dir: Path,
        *,
        grace: float = 10.0,
        log_max_bytes: int = LOG_MAX_BYTES,
        log_backups: int = LOG_BACKUPS,
    ) -> None:
        self.dir = Path(role_dir)
        self.grace = grace
        self.log_max_bytes, self.log_backups = log_max_bytes, log_backups

    # Files --------------------------------------------------------------------------
    @property
    def home(self) -> Path:
        return self.dir / "supervisor"

    @property
    def conf(self) -> Path:
        return self.home / "supervisord.conf"

    @property
    def socket(self) -> Path:
        path = self.home / "supervisord.sock"
        if len(str(path)) < _SOCKET_PATH_MAX:
            return path
        # A unix socket's path has a hard limit (108 bytes on Linux): deep state folders
        # get one in the temporary folder, named after the state folder.
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"mac-supervisord-{digest}.sock"

    @property
    def pidfile(self) -> Path:
        return self.home / "supervisord.pid"

    def launch_file(self, name: str) -> Path:
        return self.home / f"{name}.json"

    def log_file(self, name: str) -> Path:
        return self.dir / "logs" / f"{name}.log"

    def command(self, *, foreground: bool = False) -> list[str]:
        argv = [sys.executable, "-m", "supervisor.supervisord", "-c", str(self.conf)]
        return [*argv, "-n"] if foreground else argv

    def render(self, specs: Sequence[ServiceSpec]) -> str:
        """supervisord.conf for these services (written by write())."""
        parser = configparser.RawConfigParser()
        parser.optionxform = str  # keep keys as written
        logs = self.dir / "logs"
        parser["unix_http_server"] = {"file": str(self.socket), "chmod": "0700"}
        parser["supervisord"] = {
            "logfile": str(logs / "supervisord.log"),
            "logfile_maxbytes": str(self.log_max_bytes),
            "logfile_backups": str(self.log_backups),
            "pidfile": str(self.pidfile),
            "childlogdir": str(logs),
            "directory": str(self.dir),
            "silent": "true",
        }
        parser["rpcinterface:supervisor"] = {
            "supervisor.rpcinterface_factory": "supervisor.rpcinterface:make_main_rpcinterface"
        }
        parser["supervisorctl"] = {"serverurl": f"unix://{self.socket}"}
        for priority, spec in enumerate(specs, start=1):
            parser[f"program:{spec.name}"] = {
                "command": shlex.join(
                    [
                        sys.executable,
                        "-m",
                        "maccli.runtimes.launch",
                        str(self.launch_file(spec.name)),
                    ]
                ),
                "priority": str(priority * 10),
                "autostart": "true",
                "autorestart": "true",
                "startsecs": str(START_SECONDS),
                "startretries": str(RESTART_RETRIES),
                "stopsignal": "TERM",
                "stopwaitsecs": str(max(1, round(self.grace))),
                # The whole process group: gunicorn's and celery's children go too.
                "stopasgroup": "true",
                "killasgroup": "true",
                "redirect_stderr": "true",
                "stdout_logfile": str(self.log_file(spec.name)),
                "stdout_logfile_maxbytes": str(self.log_max_bytes),
                "stdout_logfile_backups": str(self.log_backups),
            }
        out = io.StringIO()
        out.write("; Written by `mac start`; rewritten on every start. Do not edit.\n")
        parser.write(out)
        # supervisord expands %(...)s in its values: a literal % must be doubled.
        return out.getvalue().replace("%", "%%")

    def write(self, specs: Sequence[ServiceSpec], env: dict[str, str]) -> bool:
        """Write the launch files and the configuration; True when the latter changed."""
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        self.home.mkdir(mode=0o700, exist_ok=True)  # the launch files hold the environment
        for spec in specs:
            payload = {"name": spec.name, "argv": spec.argv, "env": {**env, **spec.env}}
            write_atomically(self.launch_file(spec.name), json.dumps(payload).encode(), mode=0o600)
        text = self.render(specs)
        try:
            if self.conf.read_text() == text:
                return False
        except FileNotFoundError:
            pass
        write_atomically(self.conf, text.encode())
        return True

    def remove_files(self) -> None:
        self.socket.unlink(missing_ok=True)
        shutil.rmtree(self.home, ignore_errors=True)

    # The daemon -----------------------------------------------------------------------
    def rpc(self, timeout: float = 30.0) -> xmlrpc.client.ServerProxy:
        return xmlrpc.client.ServerProxy(
            "http://localhost", transport=_UnixTransport(self.socket, timeout)
        ).supervisor

    def answers(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            return self.rpc(timeout=5).getState()["statename"] == "RUNNING"
        except (OSError, xmlrpc.client.Error):
            return False

    def daemon_pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def spawn(self, timeout: float = 20.0) -> None:
        """Start supervisord in the background (it daemonizes) and wait for its socket."""
        log = self.dir / "logs" / "supervisord.log"
        with log.open("ab") as handle:
            done = subprocess.run(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        if done.returncode != 0:
            raise SupervisorError(f"supervisord exited with status {done.returncode} (see {log})")
        self.wait_answering(timeout, log)

    def wait_answering(self, timeout: float, log: Path) -> None:
        deadline = time.monotonic() + timeout
        while not self.answers():
            if time.monotonic() > deadline:
                raise SupervisorError(f"supervisord did not answer on {self.socket} (see {log})")
            time.sleep(0.1)

    def reload(self) -> None:
        """Apply a rewritten configuration, like `supervisorctl update`."""
        rpc = self.rpc()
        [[added, changed, removed]] = rpc.reloadConfig()
        for name in removed + changed:
            with contextlib.suppress(xmlrpc.client.Fault):
                rpc.stopProcessGroup(name, True)
            rpc.removeProcessGroup(name)
        for name in added + changed:
            rpc.addProcessGroup(name)

    def programs(self) -> dict[str, Program]:
        return {
            info["name"]: Program(
                info["name"],
                info["statename"],
                int(info["pid"]),
                float(info["start"]),
                int(info["exitstatus"]),
                info.get("spawnerr", ""),
            )
            for info in self.rpc().getAllProcessInfo()
        }

    def last_exit(self, name: str) -> str:
        """How the program last ended, from supervisord's log: "3", "SIGKILL" or "unknown".

        supervisord keeps the exit status only for programs in the EXITED state; one that
        died during its start (BACKOFF, FATAL) is only in the log."""
        log = self.dir / "logs" / "supervisord.log"
        try:
            lines = log.read_text(errors="replace").splitlines()[-200:]
        except OSError:
            return "unknown"
        pattern = re.compile(
            rf"exited: {re.escape(name)} \((?:exit status (\d+)|terminated by (\w+))"
        )
        for line in reversed(lines):
            found = pattern.search(line)
            if found:
                return found.group(1) or found.group(2)
        return "unknown"

    def start_program(self, name: str) -> None:
        try:
            self.rpc().startProcess(name, False)
        except xmlrpc.client.Fault as fault:
            if "ALREADY_STARTED" not in fault.faultString:
                raise

    def stop_program(self, name: str) -> None:
        try:
            self.rpc(timeout=self.grace + 30).stopProcess(name, True)
        except xmlrpc.client.Fault as fault:
            if "NOT_RUNNING" not in fault.faultString and "BAD_NAME" not in fault.faultString:
                raise

    def shutdown(self, timeout: float = 30.0) -> None:
        pid = self.daemon_pid()
        with contextlib.suppress(OSError, xmlrpc.client.Error):
            self.rpc().shutdown()
        deadline = time.monotonic() + timeout
        while pid and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
