"""How agent code runs the system's commands: one runner, never an exception.

Checks, the Docker runtime and the systemd helpers all run `docker`, `systemctl`,
`sysctl` and friends through `run_command`, or through a `Runner` that a test passes
in its place, so each can be pointed at a fake command without touching the system.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass
class CommandResult:
    returncode: int
    stdout: str = ""
    stderr: str = ""


Runner = Callable[[Sequence[str]], CommandResult]

# Seconds a killed command has to end (and close its output) before it is left behind.
KILL_GRACE = 5.0


def run_command(
    argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None
) -> CommandResult:
    """Run a command (with `env` as its whole environment when given); a missing program
    is exit code 127 like in a shell, never an exception. One past its ``timeout`` is
    killed and is exit code 124; where even that does not end it (stuck in the kernel,
    or a child of it keeps its output open), it is left behind after KILL_GRACE: the
    caller goes on, and says so, instead of hanging with it."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env) if env is not None else None,
        )
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    except OSError as exc:
        return CommandResult(126, "", f"{argv[0]}: {exc}")
    # Not `with proc`: its exit waits for the process, which a stuck one never ends.
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        said = f"{argv[0]}: timed out after {timeout:g}s"
        try:
            proc.communicate(timeout=KILL_GRACE)
        except subprocess.TimeoutExpired:
            said += ", and did not end when killed (left behind)"
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
        return CommandResult(124, "", said)
    except BaseException:  # Ctrl-C, SIGTERM as SystemExit: the command goes too
        proc.kill()
        raise
    return CommandResult(proc.returncode, stdout, stderr)
