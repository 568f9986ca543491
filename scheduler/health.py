"""What /health says of the scheduler link: whether slurmctld answers, and the drain budget.

Both are read from what the last drain pass remembered (scheduler.link, the budget in
scheduler.drainpass): one cache read, never a call to Slurm on the request path, so
/health answers at once even while slurmctld hangs. Both only degrade the answer: the
master still probes and shows nodes without Slurm. Nothing is reported while
MAC_SLURM_DRAIN is off, but a MAC_SLURM_NODE_MAP the last pass could not read (job
attribution reads it too, whatever the drain's mode).

A pass that stops (the worker gone, an error after slurmctld answered) leaves the last
word standing: past STALE_PASSES probe intervals with no pass completed, "slurm" says
the drain has stopped, and where to look.
"""

from __future__ import annotations

import time

from django.conf import settings

from contract.drainpolicy import DrainMode
from scheduler import link
from scheduler.config import node_map_error
from scheduler.drainpass import last_budget
from scheduler.tasks import LOCK_SECONDS

LOG_IN = "log in to see which"
# A drain pass follows every sweep: past this many probe intervals (and a pass's longest
# run, LOCK_SECONDS) with none completed, the drain has stopped.
STALE_PASSES = 3
# Until then after this process started, no pass is overdue: the first follows a sweep.
PROCESS_STARTED = time.time()
STOPPED = "MAC drains and resumes nothing meanwhile; the worker's log says why: mac logs worker"


def scheduler_checks(now: float | None = None, named: bool = True) -> dict[str, tuple[bool, str]]:
    """{"slurm": (ok, detail), "drain_budget": (ok, detail)}; empty while the drain is off.
    `named`: the caller is logged in and may see the nodes' names (/health answers
    anyone; the deregister endpoint is built so that strangers cannot list them).
    With "slurm_node_map" where the last pass could not read MAC_SLURM_NODE_MAP."""
    now = time.time() if now is None else now
    checks = {}
    unread = node_map_error()
    if unread:
        checks["slurm_node_map"] = check_node_map(unread, now)
    if settings.SLURM_DRAIN == DrainMode.OFF:
        return checks
    checks["slurm"] = check_slurm(now)
    budget = last_budget()
    if budget:
        checks["drain_budget"] = check_budget(budget, named)
    return checks


def check_slurm(now: float) -> tuple[bool, str]:
    state = link.load()
    if state is None:
        if now - PROCESS_STARTED > pass_allowance():
            return False, (
                f"MAC_SLURM_DRAIN={settings.SLURM_DRAIN}: no drain pass has asked slurmctld "
                f"in the {now - PROCESS_STARTED:.0f} s since start-up (one follows every "
                f"sweep). {STOPPED}"
            )
        return True, (
            f"MAC_SLURM_DRAIN={settings.SLURM_DRAIN}: slurmctld not asked yet (the first "
            "drain pass follows the next sweep)"
        )
    if state.reachable:
        stopped = stopped_passes(state, now)
        if stopped:
            return False, stopped
        return True, f"{state.detail} (asked {now - state.checked_at:.0f} s ago)"
    wait = max(0.0, state.retry_at - now)
    what = "slurmctld unreachable" if state.unreachable else "Slurm's tools failing"
    return False, (
        f"{what} for {now - state.since:.0f} s: {state.detail}. MAC drains and resumes "
        f"nothing until it answers; next try in {wait:.0f} s. On the master: mac doctor, "
        f"or SLURM_CONF={settings.SLURM_CONF} scontrol ping"
    )


def pass_allowance() -> float:
    """Seconds with no drain pass completed after which the drain has stopped."""
    return STALE_PASSES * settings.PROBE_INTERVAL + settings.PROBE_TIMEOUT + LOCK_SECONDS


def stopped_passes(state: link.LinkState, now: float) -> str:
    """Why the drain has stopped while slurmctld answers, or "": no pass completed (its
    budget written, scheduler.drainpass) since pass_allowance(), counted from start-up
    and from slurmctld's coming back at the latest."""
    budget = last_budget()
    completed = budget["at"] if budget else 0.0
    if now - max(completed, state.since, PROCESS_STARTED) <= pass_allowance():
        return ""
    last = f"the last completed {now - completed:.0f} s ago" if completed else "none completed"
    return (
        f"drain passes stopped: {last}, though one follows every sweep (every "
        f"{settings.PROBE_INTERVAL:g} s) and slurmctld last answered one "
        f"{now - state.checked_at:.0f} s ago. {STOPPED}"
    )


def check_node_map(unread: dict, now: float) -> tuple[bool, str]:
    """MAC_SLURM_NODE_MAP as the last pass met it: it could not be read (scheduler.config)."""
    return False, (
        f"{unread['error']} For {now - unread['since']:.0f} s the drain and job attribution "
        "stop at it: fix it, the next pass reads it again"
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
    edited = budget.get("edited") or []
    if edited:
        figures += (
            f"; not counted: {_names(edited, named)} drained with MAC's reason as someone "
            "edited it, theirs to resume"
        )
    held = budget["held_back"]
    if not held:
        return True, figures
    spent = "would be spent (dry run)" if dry else "spent"
    return False, f"drain budget {spent}: {figures}; would have drained: {_names(held, named)}"
