"""`mac doctor`: the troubleshooting guide's checks on this node, each with its fix.

`mac doctor --fix [CHECK...]` applies the fixes that checks give as steps
(node.checks.fixes): it shows the exact commands, asks (no terminal, or no answer,
is a no), applies them (maccli.fixsteps), then runs each check again and shows what
it finds now. The exit status says whether everything asked for now passes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence

from contract.services import SERVICES
from maccli import output
from maccli.agent import sudo_owner
from maccli.fixsteps import MacCommand, apply_step
from maccli.output import CliError
from node.checks import CHECK_IDS, CheckContext, CheckResult, CheckStatus, run_checks
from node.checks.fixes import Mac, Step, needs_root
from node.config import NodeConfig

TROUBLE = (CheckStatus.FAIL, CheckStatus.WARN)
SETTLED = (CheckStatus.PASS, CheckStatus.SKIP)

SYMBOLS = {
    CheckStatus.PASS: "pass",
    CheckStatus.WARN: "warn",
    CheckStatus.FAIL: "FAIL",
    CheckStatus.SKIP: "skip",
}


def build_context(cfg: NodeConfig) -> CheckContext:
    """The node's roots (NodeConfig.roots: the MAC_*_ROOT settings) and settings."""
    extra: dict = {"config": cfg, "rdma_interval": cfg.value("MAC_RDMA_INTERVAL")}
    from maccli.agent.specs import agent_specs

    specs = agent_specs(cfg)
    extra["services"] = [spec.name for spec in specs]
    if specs:  # where the agent's services listen (MAC_BIND), as `mac status` probes them
        extra["service_host"] = specs[0].host
    return CheckContext(roots=cfg.roots(), extra=extra)


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


def _narrowed(ctx: CheckContext, names: Sequence[str]) -> CheckContext:
    """The context that runs only the named checks; unknown names are a usage error."""
    unknown = [name for name in names if name.split(":", 1)[0] not in CHECK_IDS]
    if unknown:
        raise CliError(
            f"unknown check {', '.join(repr(name) for name in unknown)}.",
            hint=f"The checks are: {', '.join(CHECK_IDS)} (service:<name> for one service).",
            commands=["mac doctor"],
            code=2,
        )
    # service:<name> runs the checks of this node's services only: a misspelt name would
    # select none and report "0 passed", which reads as healthy.
    services = ctx.extra.get("services") or [service.name for service in SERVICES]
    strays = [
        name.split(":", 1)[1]
        for name in names
        if name.startswith("service:") and name.split(":", 1)[1] not in services
    ]
    if strays:
        raise CliError(
            f"unknown service {', '.join(repr(name) for name in strays)}.",
            hint=f"The services of this node are: "
            f"{', '.join(f'service:{name}' for name in services)}.",
            commands=["mac doctor"],
            code=2,
        )
    if not names:
        return ctx
    return dataclasses.replace(ctx, extra={**ctx.extra, "only": set(names)})


def _print(line: str, style: str = "") -> None:
    output.out().print(line, style=style or None, markup=False, highlight=False)


def users_agent(ctx: CheckContext) -> sudo_owner.Owner | None:
    """Under `sudo`, the agent of the user who ran it where root has none here
    (maccli.agent.sudo_owner): the checks read root's settings and state folder, and a
    `mac restart agent` run as root would start a second agent beside that user's."""
    cfg = ctx.extra.get("config")
    return sudo_owner.users_agent_for_root(cfg) if cfg is not None else None


def _warn_of(owner: sudo_owner.Owner, ctx: CheckContext) -> None:
    output.warn(
        f"root has no MAC agent here; {owner.user}'s agent runs from {owner.state_dir}. These "
        f"checks read root's settings and state folder ({ctx.extra['config'].state_dir}): "
        f"for {owner.user}'s agent, run `mac doctor` as {owner.user}, without sudo."
    )


def doctor(
    as_json: bool = False, ctx: CheckContext | None = None, names: Sequence[str] = ()
) -> int:
    ctx = _narrowed(ctx or build_context(NodeConfig.load()), names)
    owner = users_agent(ctx)
    if owner is not None:
        _warn_of(owner, ctx)
    with output.spinner("Running checks ..."):
        results = run_checks(ctx)
    failed = any(r.status == CheckStatus.FAIL for r in results)
    if as_json:
        payload = {"ok": not failed, "checks": [r.to_dict() for r in results]}
        output.out().print(json.dumps(payload, indent=2), markup=False, highlight=False)
    else:
        print_results(results)
    return 1 if failed else 0


# --- mac doctor --fix ------------------------------------------------------------------------


def ask(question: str) -> bool:
    """y/N on a terminal; anything else (no terminal, end of input) is a no."""
    if not sys.stdin.isatty():
        _print(f"{question}no (standard input is not a terminal; --yes applies without asking)")
        return False
    try:
        answer = input(question)
    except EOFError:
        return False
    return answer.strip().lower() in {"y", "yes"}


def _groups(results: list[CheckResult]) -> dict[tuple[Step, ...], list[CheckResult]]:
    """Results that have steps, by identical steps (every service down: one restart),
    the `mac restart agent` kind last: system fixes first, then the services."""
    groups: dict[tuple[Step, ...], list[CheckResult]] = {}
    for result in results:
        groups.setdefault(result.steps, []).append(result)
    return dict(sorted(groups.items(), key=lambda item: any(isinstance(s, Mac) for s in item[0])))


def _heading(label: str, group: list[CheckResult]) -> str:
    if len(group) == 1:
        return f"{label} {group[0].id}: {group[0].detail}"
    return f"{label} {', '.join(r.id for r in group)}:"


def _show_plan(fixable: dict, manual: list[CheckResult]) -> None:
    for steps, group in fixable.items():
        _print("")
        _print(_heading("Fix for", group))
        for step in steps:
            _print(f"  {step.line()}", "cyan")
    for result in manual:
        _print("")
        _print(_heading("Not applied by --fix (run it yourself) for", [result]))
        for line in result.fix.splitlines():
            _print(f"  {line}", "cyan")


def _theirs_to_apply(fixable: dict) -> dict[tuple[Step, ...], list[CheckResult]]:
    """The fixes that act on the agent (`mac restart agent`): under sudo with a user's
    agent, root applying them would start an agent of its own beside that one."""
    return {
        steps: group
        for steps, group in fixable.items()
        if any(isinstance(step, Mac) for step in steps)
    }


def _show_theirs(owner: sudo_owner.Owner, ids: list[str]) -> None:
    """The agent's fixes held back: what root found of them is root's view (its ports,
    its folder), so the user checks them again, on the user's own agent, first."""
    _print("")
    _print(f"Not applied as root ({owner.user}'s agent): {', '.join(ids)}.")
    _print(f"  As {owner.user}, without sudo, check that agent and fix what it finds:")
    _print(f"  mac doctor --fix {' '.join(ids)}", "cyan")


def _apply(
    steps: tuple[Step, ...], group: list[CheckResult], ctx: CheckContext, mac: MacCommand
) -> list[CheckResult]:
    """Apply the steps in order (stop at the first that fails), then run the checks again."""
    ids = [result.id for result in group]
    _print("")
    _print(f"Fixing {', '.join(ids)}:")
    for step in steps:
        _print(f"  $ {step.line()}")
        applied = apply_step(step, ctx, mac)
        if not applied.ok:
            _print(f"    failed: {applied.error}", "red")
            break
    after = run_checks(dataclasses.replace(ctx, extra={**ctx.extra, "only": set(ids)}))
    for result in after:
        _print(f"  now {result.status.value}: {result.id}: {result.detail}", _STYLE[result.status])
    return after


_STYLE = {CheckStatus.PASS: "green", CheckStatus.SKIP: "dim"} | dict.fromkeys(TROUBLE, "red")


def fix(
    names: Sequence[str] = (),
    *,
    yes: bool = False,
    dry_run: bool = False,
    mac: MacCommand,
    ctx: CheckContext | None = None,
    confirm: Callable[[str], bool] = ask,
) -> int:
    """`mac doctor --fix`: 0 when everything asked for passes (or is skipped) afterwards."""
    ctx = _narrowed(ctx or build_context(NodeConfig.load()), names)
    owner = users_agent(ctx)
    if owner is not None:
        _warn_of(owner, ctx)
    with output.spinner("Running checks ..."):
        results = run_checks(ctx)
    trouble = [result for result in results if result.status in TROUBLE]
    if not trouble:
        shown = ", ".join(result.id for result in results) or "the checks"
        _print(f"Nothing to fix: {shown} {'pass' if len(results) != 1 else 'passes'}.")
        return 0
    fixable = _groups([result for result in trouble if result.steps])
    manual = [result for result in trouble if not result.steps]
    theirs = _theirs_to_apply(fixable) if owner is not None else {}
    fixable = {steps: group for steps, group in fixable.items() if steps not in theirs}
    _show_plan(fixable, manual)
    theirs_ids = [result.id for group in theirs.values() for result in group]
    if owner is not None and theirs_ids:
        _show_theirs(owner, theirs_ids)
    if not fixable:
        _print("\nNothing here can be applied by --fix; run the commands above.")
        return 1
    if dry_run:
        _print("\nDry run: nothing was changed.")
        return 1
    if os.geteuid() != 0 and any(needs_root(steps) for steps in fixable):
        ids = " ".join(result.id for group in fixable.values() for result in group)
        raise CliError(
            "these fixes change the system and need root; nothing was changed.",
            hint="Run them as root:",
            commands=[f"sudo mac doctor --fix {ids}"],
        )
    if not yes and not confirm("\nApply these fixes? [y/N] "):
        _print("Nothing was changed.")
        return 1
    now = list(manual)
    for steps, group in fixable.items():
        now += _apply(steps, group, ctx, mac)
    left = sorted({result.id for result in now if result.status not in SETTLED})
    _print("")
    if left:
        _print(f"Still to fix: {', '.join(left)}. See `mac doctor` for each.", "red")
    if owner is not None and theirs_ids:
        _print(f"Left to {owner.user}'s agent: {', '.join(theirs_ids)} (above).", "red")
    if left or theirs_ids:
        return 1
    _print("Fixed: every check asked for passes now.", "green")
    return 0
