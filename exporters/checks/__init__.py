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


def _registered() -> list:
    # Imported here: the check modules import the types above from this package.
    from exporters.checks import config, docker, gpu, master, network, rdma, services

    return [
        *config.CHECKS,
        *master.CHECKS,
        *services.CHECKS,
        *network.CHECKS,
        *docker.CHECKS,
        *gpu.CHECKS,
        *rdma.CHECKS,
    ]


def _as_list(results: CheckResult | list[CheckResult]) -> list[CheckResult]:
    return results if isinstance(results, list) else [results]


def run_checks(ctx: CheckContext | None = None) -> list[CheckResult]:
    """Run every registered check in the guide's order; one broken check never hides the rest.

    ctx.extra["only"] / ctx.extra["skip"] (sets of check ids or id prefixes such as
    "service") narrow the run, e.g. for sys-manager inside a container.
    """
    ctx = ctx or CheckContext()
    only = set(ctx.extra.get("only") or ())
    skip = set(ctx.extra.get("skip") or ())
    results: list[CheckResult] = []
    for check in _registered():
        try:
            found = _as_list(check(ctx))
        except Exception as exc:  # a bug in one check must not blank the report
            name = check.__name__.removeprefix("check_")
            found = [CheckResult(name, name, CheckStatus.WARN, f"the check itself failed: {exc!r}")]
        for result in found:
            prefix = result.id.split(":", 1)[0]
            if only and result.id not in only and prefix not in only:
                continue
            if result.id in skip or prefix in skip:
                continue
            results.append(result)
    return results
