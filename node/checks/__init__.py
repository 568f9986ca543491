"""The troubleshooting guide as code: checks that `mac doctor` and sys-manager both run.

Interface (fixed; the check functions themselves live in modules of this package):
    run_checks(ctx: CheckContext | None = None) -> list[CheckResult]
"""

from __future__ import annotations

from collections.abc import Callable

from node.checks import (
    config,
    docker,
    gpu,
    gpu_reset,
    master,
    network,
    networkd,
    rdma,
    services,
    slurm,
)
from node.checks.base import CheckContext, CheckResult, CheckStatus

__all__ = ["CHECKS", "CHECK_IDS", "CheckContext", "CheckResult", "CheckStatus", "run_checks"]

# The guide's order: configuration, the master, services, network, Docker, GPUs (and
# what an interrupted GPU reset left stopped), RDMA; then, on a master that drains
# nodes, Slurm.
CHECKS = [
    *config.CHECKS,
    *master.CHECKS,
    *services.CHECKS,
    *network.CHECKS,
    *networkd.CHECKS,
    *docker.CHECKS,
    *gpu.CHECKS,
    *gpu_reset.CHECKS,
    *rdma.CHECKS,
    *slurm.CHECKS,
]


def check_id(check: Callable) -> str:
    """The id (or id prefix, "service" for service:<name>) of what a check function reports."""
    return getattr(check, "check_id", check.__name__.removeprefix("check_"))


# Every id a check reports, or its prefix: what `mac doctor --fix CHECK...` accepts.
CHECK_IDS = tuple(check_id(check) for check in CHECKS)


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
    wanted = {name.split(":", 1)[0] for name in only}
    results: list[CheckResult] = []
    for check in CHECKS:
        if (only and check_id(check) not in wanted) or check_id(check) in skip:
            continue  # not asked for: not run at all (some wait on the network or sleep)
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
