"""`mac logs` under the docker runtime: `docker logs [--tail N] [-f] mac-<service>`; the
container's stdout and stderr pass through unchanged, and Docker's own complaint about a
missing container or engine becomes an error that says what to run next."""

from __future__ import annotations

import contextlib
import subprocess
import sys

from maccli.output import CliError

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
