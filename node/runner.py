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


def run_command(
    argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None
) -> CommandResult:
    """Run a command (with `env` as its whole environment when given); a missing program
    is exit code 127 like in a shell, never an exception."""
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=dict(env) if env is not None else None,
        )
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]}: timed out after {timeout:g}s")
    except OSError as exc:
        return CommandResult(126, "", f"{argv[0]}: {exc}")
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)
