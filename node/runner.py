"""How agent code runs the system's commands: one runner, never an exception.

Checks, the Docker runtime and the systemd helpers all run `docker`, `systemctl`,
`sysctl` and friends through `run_command`, or through a `Runner` that a test passes
in its place, so each can be pointed at a fake command without touching the system.
"""

from __future__ import annotations

import subprocess
import threading
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
    is exit code 127 like in a shell, never an exception (output that is not UTF-8 is
    read with replacement characters). One past its ``timeout`` is killed and is exit
    code 124; one that does not end even then (a GPU reset stuck in the kernel) is left
    behind after KILL_GRACE, reaped whenever it ends: the caller goes on, and says so,
    instead of hanging with it."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
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
        said = f"{argv[0]}: timed out after {timeout:g}s"
        if not _killed(proc):
            said += ", and did not end when killed (left behind)"
        return CommandResult(124, "", said)
    except BaseException:  # Ctrl-C, SIGTERM as SystemExit: the command goes too
        _killed(proc)
        raise
    return CommandResult(proc.returncode, stdout, stderr)


def _killed(proc: subprocess.Popen) -> bool:
    """Kill it and wait KILL_GRACE for it to end (the process, not its output, which a
    child of it may hold open); whether it ended. One that did not is reaped by a thread
    whenever it does."""
    proc.kill()
    try:
        proc.wait(timeout=KILL_GRACE)
        ended = True
    except subprocess.TimeoutExpired:
        threading.Thread(target=proc.wait, name="reap", daemon=True).start()
        ended = False
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    return ended
