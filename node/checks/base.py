"""What every check shares: its result types, and the context it reads the system through.

Checks never call subprocess directly; they go through these helpers, which read
their stand-ins from CheckContext.extra, so a test can point any check at a
prepared directory, a fake command or a local server. Over HTTP they use what the
contract gives both sides: contract.master_api.MasterClient for the master's API
and contract.liveness.check_url for a service's liveness URL.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from node.checks.fixes import Step, render
from node.config import NodeConfig
from node.host import Roots
from node.runner import Runner, run_command


class CheckStatus(StrEnum):
    PASS = "pass"  # noqa: S105 (a check outcome, not a password)
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass
class CheckResult:
    id: str  # stable identifier, e.g. "ip_forward"
    title: str  # what was checked, for people
    status: CheckStatus
    detail: str = ""  # what was found
    fix: str = ""  # the exact command(s) that fix it; empty when passing
    # The fix as steps `mac doctor --fix` can apply; `fix` is then rendered from them,
    # so the text shown is what --fix runs. Empty for fixes left to the operator.
    steps: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        if self.steps:
            if self.fix:
                raise ValueError(f"{self.id}: a fix given as steps has no text of its own")
            self.fix = render(self.steps)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "title": self.title,
            "status": str(self.status),
            "detail": self.detail,
            "fix": self.fix,
        }


@dataclass
class CheckContext:
    """Where checks read the system (tests point every root at a prepared directory), and
    their stand-ins in `extra`: commands, the node's settings, HTTP timeouts."""

    roots: Roots = field(default_factory=Roots)
    extra: dict = field(default_factory=dict)

    def local(self, host_path: str) -> Path:
        """Where a host path (/etc/sysctl.d/..., /proc/sys/...) is under this context's roots."""
        return self.roots.host(host_path)

    def host(self, local_path: Path | str) -> str:
        """The host path a local one stands for: what a printed command must name."""
        return self.roots.host_path(local_path)


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
