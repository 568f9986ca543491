"""What /health says of the scheduler link: whether slurmctld answers, and the drain budget.

Both are read from what the last drain pass remembered (scheduler.link, the budget in
scheduler.drainpass): one cache read, never a call to Slurm on the request path, so
/health answers at once even while slurmctld hangs. Both only degrade the answer: the
master still probes and shows nodes without Slurm. Nothing is reported while
MAC_SLURM_DRAIN is off.
"""

from __future__ import annotations

import time

from django.conf import settings

from contract.drainpolicy import DrainMode
from scheduler import link
from scheduler.drainpass import last_budget

LOG_IN = "log in to see which"


def scheduler_checks(now: float | None = None, named: bool = True) -> dict[str, tuple[bool, str]]:
    """{"slurm": (ok, detail), "drain_budget": (ok, detail)}; empty while the drain is off.
    `named`: the caller is logged in and may see the nodes' names (/health answers
    anyone; the deregister endpoint is built so that strangers cannot list them)."""
    if settings.SLURM_DRAIN == DrainMode.OFF:
        return {}
    now = time.time() if now is None else now
    checks = {"slurm": check_slurm(now)}
    budget = last_budget()
    if budget:
        checks["drain_budget"] = check_budget(budget, named)
    return checks


def check_slurm(now: float) -> tuple[bool, str]:
    state = link.load()
    if state is None:
        return True, (
            f"MAC_SLURM_DRAIN={settings.SLURM_DRAIN}: slurmctld not asked yet (the first "
            "drain pass follows the next sweep)"
        )
    if state.reachable:
        return True, f"{state.detail} (asked {now - state.checked_at:.0f} s ago)"
    wait = max(0.0, state.retry_at - now)
    what = "slurmctld unreachable" if state.unreachable else "Slurm's tools failing"
    return False, (
        f"{what} for {now - state.since:.0f} s: {state.detail}. MAC drains and resumes "
        f"nothing until it answers; next try in {wait:.0f} s. On the master: mac doctor, "
        f"or SLURM_CONF={settings.SLURM_CONF} scontrol ping"
    )


def _names(names: list[str], named: bool) -> str:
    """The first 20 of `names` and how many more, or only how many for a stranger."""
    if not named:
        return f"{len(names)} node(s) ({LOG_IN})"
    return ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")


def check_budget(budget: dict, named: bool = True) -> tuple[bool, str]:
    dry = budget["mode"] == DrainMode.DRY_RUN
    keeps = "would keep" if dry else "keeps"
    figures = (
        f"MAC {keeps} {budget['drained']} of the {budget['limit']} nodes "
        f"MAC_DRAIN_BUDGET={budget['budget']} allows of {budget['fleet']} drained"
    )
    unmonitored = budget.get("unmonitored") or []
    if unmonitored:
        first = unmonitored[0]
        figures += (
            f"; {len(unmonitored)} of them on Slurm nodes MAC no longer monitors, which it "
            f"never resumes: {_names(unmonitored, named)}"
            + (f" (resume by hand: scontrol update NodeName={first} State=RESUME)" if named else "")
        )
    held = budget["held_back"]
    if not held:
        return True, figures
    spent = "would be spent (dry run)" if dry else "spent"
    return False, f"drain budget {spent}: {figures}; would have drained: {_names(held, named)}"
