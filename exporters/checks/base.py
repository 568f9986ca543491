"""What every check shares: its result types, and the context it reads the system through.

Checks never call subprocess directly; they go through these helpers, which read
their stand-ins from CheckContext.extra, so a test can point any check at a
prepared directory, a fake command or a local server. Over HTTP they use what the
contract gives both sides: contract.master_api.MasterClient for the master's API
and contract.liveness.check_url for a service's liveness URL.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from node.commands import Runner, run_command
from node.config import NodeConfig


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

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CheckContext:
    """Where checks read the system; tests point every path at a prepared directory."""

    proc_root: str = "/proc"
    sys_root: str = "/sys"
    dev_root: str = "/dev"
    etc_root: str = "/etc"
    extra: dict = field(default_factory=dict)


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
