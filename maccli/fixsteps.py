"""Apply one step of a check's fix (node.checks.fixes) on this node.

Each step does what its printed line says, through the CheckContext's roots: a sysctl
is the write to /proc/sys that `sysctl -w` makes, a file goes where `tee` would put it,
commands run through the one command runner (node.runner), and `mac restart agent`
through mac's own command, so under either runtime it is the path operators use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contract.atomicfile import write_atomically
from node.checks.base import CheckContext
from node.checks.fixes import (
    ApplySysctlFile,
    Mac,
    MakeDirs,
    Run,
    SetSysctl,
    SetSysctlInFile,
    Step,
    WriteFile,
)
from node.runner import run_command

# Enabling and starting a service, or a networkd reload, can take a while on a busy host.
COMMAND_TIMEOUT = 120.0

MacCommand = Callable[[Sequence[str]], int]


@dataclass
class Applied:
    ok: bool
    error: str = ""


def _run(ctx: CheckContext, argv: Sequence[str]) -> Applied:
    run = ctx.extra.get("run")
    result = run(list(argv)) if run else run_command(argv, timeout=COMMAND_TIMEOUT)
    if result.returncode == 0:
        return Applied(True)
    said = (result.stderr or result.stdout).strip().splitlines()
    return Applied(False, said[-1] if said else f"exit code {result.returncode}")


def apply_step(step: Step, ctx: CheckContext, mac: MacCommand) -> Applied:
    """Do what `step.line()` says; never raises for the system's refusals."""
    try:
        if isinstance(step, SetSysctl):
            with open(ctx.local(step.path), "w", encoding="ascii") as handle:
                handle.write(step.value + "\n")
        elif isinstance(step, MakeDirs):
            ctx.local(step.path).mkdir(parents=True, exist_ok=True)
        elif isinstance(step, WriteFile):
            write_atomically(ctx.local(step.path), step.content.encode(), mode=0o644)
        elif isinstance(step, SetSysctlInFile):
            path = ctx.local(step.path)
            mode = os.stat(path).st_mode & 0o7777
            write_atomically(path, step.rewrite(path.read_text()).encode(), mode=mode)
        elif isinstance(step, ApplySysctlFile):
            return _run(ctx, ("sysctl", "-p", str(ctx.local(step.path))))
        elif isinstance(step, Run):
            return _run(ctx, step.argv)
        elif isinstance(step, Mac):
            code = mac(list(step.args))
            return Applied(code == 0, "" if code == 0 else f"exit code {code}")
        else:  # a new kind of step must be taught here before a check may return it
            raise TypeError(f"no way to apply {step!r}")
    except OSError as exc:
        return Applied(False, f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
    return Applied(True)
