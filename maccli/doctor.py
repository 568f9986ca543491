"""`mac doctor`: the troubleshooting guide's checks on this node, each with its fix."""

from __future__ import annotations

import json

from exporters.checks import CheckContext, CheckResult, CheckStatus, run_checks
from maccli import output
from node.config import NodeConfig

SYMBOLS = {
    CheckStatus.PASS: "pass",
    CheckStatus.WARN: "warn",
    CheckStatus.FAIL: "FAIL",
    CheckStatus.SKIP: "skip",
}


def build_context(cfg: NodeConfig) -> CheckContext:
    """Roots from MAC_PROC_ROOT / MAC_SYS_ROOT / MAC_DEV_ROOT / MAC_ETC_ROOT (tests, containers)."""
    extra: dict = {"config": cfg}
    if cfg.get("MAC_RUN_ROOT"):
        extra["run_root"] = cfg.get("MAC_RUN_ROOT")
    if cfg.get("MAC_USR_ROOT"):
        extra["usr_root"] = cfg.get("MAC_USR_ROOT")
    if cfg.get("MAC_LIB_ROOT"):
        extra["lib_root"] = cfg.get("MAC_LIB_ROOT")
    if cfg.get("MAC_RDMA_INTERVAL"):
        extra["rdma_interval"] = float(cfg.get("MAC_RDMA_INTERVAL") or 1)
    from maccli.agent.specs import agent_specs

    specs = agent_specs(cfg)
    extra["services"] = [spec.name for spec in specs]
    if specs:  # where the agent's services listen (MAC_BIND), as `mac status` probes them
        extra["service_host"] = specs[0].host
    return CheckContext(
        proc_root=cfg.get("MAC_PROC_ROOT") or "/proc",
        sys_root=cfg.get("MAC_SYS_ROOT") or "/sys",
        dev_root=cfg.get("MAC_DEV_ROOT") or "/dev",
        etc_root=cfg.get("MAC_ETC_ROOT") or "/etc",
        extra=extra,
    )


def print_results(results: list[CheckResult]) -> None:
    rows = [(output.styled(SYMBOLS[r.status].lower()), r.id, r.detail) for r in results]
    output.table(["STATUS", "CHECK", "FOUND"], rows)
    console = output.out()
    for (status, fix), group in _by_fix(results).items():
        console.print()
        label = "Fix" if status == CheckStatus.FAIL else "To do"
        if len(group) == 1:
            heading = f"{label} for {group[0].id}: {group[0].detail}"
        else:  # e.g. every service down: one fix, not eight copies of it
            heading = f"{label} for {', '.join(r.id for r in group)}:"
        console.print(heading, markup=False, highlight=False)
        for line in fix.splitlines():
            console.print(f"  {line}", style="cyan", markup=False, highlight=False)
    counts = {status: sum(r.status == status for r in results) for status in CheckStatus}
    console.print()
    console.print(
        f"{counts[CheckStatus.PASS]} passed, {counts[CheckStatus.FAIL]} failed, "
        f"{counts[CheckStatus.WARN]} warnings, {counts[CheckStatus.SKIP]} skipped.",
        markup=False,
        highlight=False,
    )


def _by_fix(results: list[CheckResult]) -> dict[tuple[CheckStatus, str], list[CheckResult]]:
    """Failures and warnings that have a fix, grouped by that fix, in check order."""
    groups: dict[tuple[CheckStatus, str], list[CheckResult]] = {}
    for result in results:
        if result.status in (CheckStatus.FAIL, CheckStatus.WARN) and result.fix:
            groups.setdefault((result.status, result.fix), []).append(result)
    return groups


def doctor(as_json: bool = False, ctx: CheckContext | None = None) -> int:
    ctx = ctx or build_context(NodeConfig.load())
    with output.spinner("Running checks ..."):
        results = run_checks(ctx)
    failed = any(r.status == CheckStatus.FAIL for r in results)
    if as_json:
        payload = {"ok": not failed, "checks": [r.to_dict() for r in results]}
        output.out().print(json.dumps(payload, indent=2), markup=False, highlight=False)
    else:
        print_results(results)
    return 1 if failed else 0
