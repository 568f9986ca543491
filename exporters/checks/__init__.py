"""The troubleshooting guide as code: checks that `mac doctor` and sys-manager both run.

Interface (fixed; the check functions themselves live in modules of this package):
    run_checks(ctx: CheckContext | None = None) -> list[CheckResult]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum


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


def run_checks(ctx: CheckContext | None = None) -> list[CheckResult]:
    """Run every registered check; filled in by the `mac doctor` work (issue 5)."""
    return []
