"""`mac doctor`: the troubleshooting guide's checks on this node, each with its fix."""

from __future__ import annotations

import json

from exporters.agentconf import AgentConfig
from exporters.checks import CheckContext, CheckResult, CheckStatus, run_checks
from macweb.cli import output

SYMBOLS = {
    CheckStatus.PASS: "pass",
    CheckStatus.WARN: "warn",
    CheckStatus.FAIL: "FAIL",
    CheckStatus.SKIP: "skip",
}


def build_context(cfg: AgentConfig) -> CheckContext:
    """Roots from MAC_PROC_ROOT / MAC_SYS_ROOT / MAC_DEV_ROOT / MAC_ETC_ROOT (tests, containers)."""
    extra: dict = {"config": cfg}
    if cfg.get("MAC_RUN_ROOT"):
        extra["run_root"] = cfg.get("MAC_RUN_ROOT")
    if cfg.get("MAC_USR_ROOT"):
        extra["usr_root"] = cfg.get("MAC_USR_ROOT")
    if cfg.get("MAC_RDMA_INTERVAL"):
        extra["rdma_interval"] = float(cfg.get("MAC_RDMA_INTERVAL") or 1)
    from macweb.cli.agent import agent_specs

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
    failures = [r for r in results if r.status in (CheckStatus.FAIL, CheckStatus.WARN) and r.fix]
    console = output.out()
    for result in failures:
        console.print()
        label = "Fix" if result.status == CheckStatus.FAIL else "To do"
        console.print(f"{label} for {result.id}: {result.detail}", markup=False, highlight=False)
        for line in result.fix.splitlines():
            console.print(f"  {line}", style="cyan", markup=False, highlight=False)
    counts = {status: sum(r.status == status for r in results) for status in CheckStatus}
    console.print()
    console.print(
        f"{counts[CheckStatus.PASS]} passed, {counts[CheckStatus.FAIL]} failed, "
        f"{counts[CheckStatus.WARN]} warnings, {counts[CheckStatus.SKIP]} skipped.",
        markup=False,
        highlight=False,
    )


def doctor(as_json: bool = False, ctx: CheckContext | None = None) -> int:
    ctx = ctx or build_context(AgentConfig.load())
    with output.spinner("Running checks ..."):
        results = run_checks(ctx)
    failed = any(r.status == CheckStatus.FAIL for r in results)
    if as_json:
        payload = {"ok": not failed, "checks": [r.to_dict() for r in results]}
        output.out().print(json.dumps(payload, indent=2), markup=False, highlight=False)
    else:
        print_results(results)
    return 1 if failed else 0
