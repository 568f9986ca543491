"""What every check shares: the command runner and the context's settings.

Checks never call subprocess directly; they go through these helpers, which read
their stand-ins from CheckContext.extra, so a test can point any check at a
prepared directory, a fake command or a local server. Over HTTP they use what the
contract gives both sides: contract.master_api.MasterClient for the master's API
and contract.liveness.check_url for a service's liveness URL.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from exporters.checks import CheckContext
from exporters.nodeconfig import NodeConfig


@dataclass
class CommandResult:
    returncode: int
    stdout: str = ""
    stderr: str = ""


Runner = Callable[[Sequence[str]], CommandResult]


def run_command(argv: Sequence[str], timeout: float = 10.0) -> CommandResult:
    """Run a command; a missing program is exit code 127 like in a shell, never an exception."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]}: timed out after {timeout:g}s")
    except OSError as exc:
        return CommandResult(126, "", f"{argv[0]}: {exc}")
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def runner(ctx: CheckContext) -> Runner:
    return ctx.extra.get("run") or run_command


def which(ctx: CheckContext, program: str) -> str | None:
    """Where a program is; ctx.extra["path"] (a PATH string) overrides the process PATH."""
    return shutil.which(program, path=ctx.extra.get("path"))


def config(ctx: CheckContext) -> NodeConfig:
    cfg = ctx.extra.get("config")
    if cfg is None:
        cfg = NodeConfig.load()
        ctx.extra["config"] = cfg
    return cfg


def timeout(ctx: CheckContext) -> float:
    return float(ctx.extra.get("http_timeout", 5.0))
