"""`mac logs <service>`: what one service printed, under the runtime that runs it here.

- docker: `docker logs [--tail N] [-f] mac-<service>`; the container's stdout and stderr
  pass through unchanged. The Docker master's mac-redis and mac-prometheus too.
- process: the service's log file, `<state>/<role>/logs/<service>.log` (its stdout and
  stderr, and the runtime's own start lines); -f keeps printing what is appended, polling
  the file, until Ctrl-C.

The api-server logs every request there (gunicorn's access log goes to its stdout), so
`mac logs api-server | grep /api/v1/register` shows the agents' registrations.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

from contract.services import SERVICES
from maccli.agent.bundle import BUNDLE_NAME
from maccli.output import CliError
from maccli.runtimes import choose_runtime
from maccli.runtimes.docker import DockerRuntime
from maccli.runtimes.process import ProcessRuntime
from node.config import NodeConfig

# The services of `mac start master` (maccli.master.master_specs), by name, and
# mac-redis, which only the Docker master runs (the process runtime uses the host's).
MASTER_SERVICES = ("api-server", "worker", "beat", "prometheus", "alertmanager", "redis", "proxy",
                   # Scale-out mode (MAC_SCRAPE_SHARDS, maccli.scaleout), with scraper-K.
                   "store", "rules")  # fmt: skip
SCRAPER = re.compile(r"scraper-\d+")
DOCKER_ONLY = {"redis": "the host's redis-server"}
AGENT_SERVICES = tuple(service.name for service in SERVICES)
FOLLOW_POLL = 0.25  # seconds between two looks at a followed log file
_BLOCK = 64 * 1024


def role_of(service: str, role: str | None = None) -> tuple[str, str]:
    """(service, role) for a name as typed; `mac-<service>` (the container) is accepted."""
    name = service.strip()
    if name not in AGENT_SERVICES + MASTER_SERVICES and name.startswith("mac-"):
        name = name[len("mac-") :]
    master = name in MASTER_SERVICES or SCRAPER.fullmatch(name)
    owner = "agent" if name in AGENT_SERVICES else "master" if master else ""
    if not owner:
        raise CliError(
            f"unknown service {service!r}.",
            hint=(
                f"Agent services: {', '.join(AGENT_SERVICES)}.\n"
                f"Master services: {', '.join(MASTER_SERVICES)}.\nFor example:"
            ),
            commands=["mac logs sys-exporter", "mac logs api-server | grep /api/v1/register"],
            code=2,
        )
    if role and role != owner:
        raise CliError(
            f"{name} is {_a(owner)} service, not {_a(role)} one.",
            hint="Leave --role out (it follows from the name):",
            commands=[f"mac logs {name}"],
            code=2,
        )
    return name, owner


def _a(role: str) -> str:
    return f"an {role}" if role == "agent" else f"a {role}"


def logs(
    service: str,
    role: str | None = None,
    lines: int | None = None,
    follow: bool = False,
    runtime_name: str | None = None,
) -> int:
    name, role = role_of(service, role)
    cfg = NodeConfig.load()
    runtime = choose_runtime(cfg, role, runtime_name)
    try:
        if isinstance(runtime, DockerRuntime):
            return docker_logs(name, role, lines, follow)
        assert isinstance(runtime, ProcessRuntime)
        if name in DOCKER_ONLY:
            raise CliError(
                f"{name} is not run by mac under the process runtime: the master uses "
                f"{DOCKER_ONLY[name]}, which logs to the system journal.",
                hint="Read it there (or, if the master runs in Docker, add --runtime docker):",
                commands=[
                    f"journalctl -u {name}-server -n 50",
                    f"mac logs {name} --runtime docker",
                ],
            )
        path = runtime.log_file(role, name)
        if role == "agent" and not path.exists() and name != "sys-exporter":
            # The Python services share one process and its log (maccli.agent.bundle).
            bundled = runtime.log_file(role, BUNDLE_NAME)
            path = bundled if bundled.exists() else path
        return file_logs(path, name, role, lines, follow)
    except BrokenPipeError:
        # `mac logs ... | head`: the reader has gone, which is not an error.
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


# --- docker ---------------------------------------------------------------------------------

_NO_CONTAINER = b"No such container"
_NO_ENGINE = b"Cannot connect to the Docker daemon"


def docker_logs(service: str, role: str, lines: int | None, follow: bool) -> int:
    container = f"mac-{service}"
    argv = ["docker", "logs"]
    if lines is not None:
        argv += ["--tail", str(lines)]
    if follow:
        argv.append("-f")
    argv.append(container)
    sys.stdout.flush()
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as exc:
        raise CliError(
            f"cannot run docker: {exc.strerror or exc}.",
            hint="Install Docker, or read the log of the process runtime:",
            commands=[f"mac logs {service} --runtime process"],
        ) from None
    problem = b""
    try:
        assert child.stderr is not None
        # The container's stderr passes through line by line; Docker's own complaint
        # about a missing container or engine becomes an error with the next command.
        for raw in child.stderr:
            if not problem and (_NO_CONTAINER in raw or _NO_ENGINE in raw):
                problem = raw.strip()
                continue
            sys.stderr.buffer.write(raw)
            sys.stderr.buffer.flush()
        code = child.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached docker too (same terminal): let it go, and end quietly.
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(5)
        if child.poll() is None:
            child.terminate()
            child.wait()
        return 0
    if code != 0 and _NO_CONTAINER in problem:
        raise CliError(
            f"there is no container {container}: {service} has not run under the docker "
            "runtime here.",
            hint=f"Start the {role} (or, if it runs as processes, add --runtime process):",
            commands=[f"mac start {role}", f"mac logs {service} --runtime process"],
        )
    if code != 0 and problem:
        raise CliError(
            f"the Docker engine does not answer: {problem.decode(errors='replace')}",
            hint="Start Docker, or read the log of the process runtime:",
            commands=[
                "sudo systemctl enable --now docker",
                f"mac logs {service} --runtime process",
            ],
        )
    return code


# --- process --------------------------------------------------------------------------------


def tail_offset(handle: BinaryIO, lines: int | None) -> int:
    """Where the last `lines` lines of the file begin (0 for all of it)."""
    end = handle.seek(0, os.SEEK_END)
    if lines is None or end == 0:
        return 0
    if lines <= 0:
        return end
    handle.seek(end - 1)
    # A final newline ends the last line; it does not start another one.
    position = end - 1 if handle.read(1) == b"\n" else end
    found = 0
    while position > 0:
        start = max(0, position - _BLOCK)
        handle.seek(start)
        block = handle.read(position - start)
        index = len(block)
        while (index := block.rfind(b"\n", 0, index)) >= 0:
            found += 1
            if found == lines:
                return start + index + 1
        position = start
    return 0


def file_logs(path: Path, service: str, role: str, lines: int | None, follow: bool) -> int:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise CliError(
            f"{service} has not run under the process runtime here: there is no {path}.",
            hint=f"Start the {role} (or, if it runs in Docker, add --runtime docker):",
            commands=[f"mac start {role}", f"mac logs {service} --runtime docker"],
        ) from None
    except OSError as exc:
        raise CliError(
            f"cannot read {path}: {exc.strerror or exc}.", commands=[f"sudo mac logs {service}"]
        ) from None
    out = sys.stdout.buffer
    try:
        handle.seek(tail_offset(handle, lines))
        while chunk := handle.read(_BLOCK):
            out.write(chunk)
        out.flush()
        while follow:
            # What is appended, until Ctrl-C; a truncated file is read again from its
            # start, a replaced one (same path, new file) is reopened.
            chunk = handle.read(_BLOCK)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            time.sleep(FOLLOW_POLL)
            try:
                now = os.stat(path)
            except FileNotFoundError:
                continue  # removed; the next start creates it again
            if now.st_ino != os.fstat(handle.fileno()).st_ino:
                with contextlib.suppress(OSError):
                    fresh = path.open("rb")
                    handle.close()
                    handle = fresh
            elif now.st_size < handle.tell():
                handle.seek(0)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            out.flush()
    finally:
        handle.close()
    return 0
