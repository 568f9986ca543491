"""One drain pass, after every sweep: read Slurm and the verdicts, decide, act, record.

    due? -> ping -> read Slurm (nodes, reservations) -> plan (scheduler.drain) -> act
         -> record (history, counters, DrainRecord) -> the nodes' Slurm view -> budget alert

The sweep queues it (scheduler.tasks.queue_drain_pass) once its write is published, so
a verdict that turned unhealthy in this sweep is drained a moment later. Nothing here
waits on a dead controller: `scontrol ping` answers within 2 s (at once when slurmctld is
down), and while it fails the passes back off (scheduler.link). Slurm's tools are run
through scheduler.slurm.SlurmClient, never a shell.

MAC_SLURM_DRAIN=dry-run runs the same pass up to the plan and records what it would have
done (``slurm_dry_run`` events, the counters' ``dry_run="true"``), changing nothing in
Slurm. Every decision reaches the node's history once: a refusal that holds sweep after
sweep (the budget, someone else's drain, an unknown name) is written when it starts and
again only when it changes (DrainRecord). Between the read and the command a person can
still drain a node by hand; the pass reads Slurm a fraction of a second before it acts,
which is as close as Slurm's tools allow.

Two passes never act side by side: the task (scheduler.tasks) holds a lock, and the pass
renews it before each command it sends (`still_held`); a pass that lost it (stalled past
the lock's time) sends nothing more, records what it did and decided, and leaves its
other actions to the pass that holds the lock now, which read Slurm afresh.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError
from django.utils import timezone

from alerting import drainalert
from contract.drainpolicy import DrainMode
from contract.verdicts import HealthAction, HealthState, worst_action
from inventory.choices import EventKind
from inventory.models import NodeEvent
from inventory.services import node_verdicts
from inventory.services.scheduling import clear_slurm_view, save_slurm_view
from scheduler import link
from scheduler.config import NodeNameMap, slurm_client, slurm_configured
from scheduler.drain import (
    ACTIONS,
    REASON_LIMIT,
    TAKES_OUT,
    Decision,
    Hold,
    MacNode,
    Plan,
    Policy,
    Step,
    hold_of,
    over_budget_step,
    plan,
    same_but_times,
)
from scheduler.drain import state_words as slurm_state_words
from scheduler.models import DrainRecord
from scheduler.slurm import (
    SlurmClient,
    SlurmCommandRefused,
    SlurmError,
    SlurmNode,
    SlurmUnknownNode,
    SlurmUnreachable,
)

log = logging.getLogger(__name__)
# The decisions whose reason MAC wrote into Slurm.
WROTE = frozenset({Decision.DRAIN, Decision.REASON, Decision.REBOOT})

ACTOR = "mac-drain"
BUDGET_KEY = "scheduler:drain:budget"
# Set once a pass wrote the nodes' Slurm view: turning the drain off then clears it.
VIEW_KEY = "scheduler:drain:view"
COUNTER_PREFIX = "scheduler:drain:decisions:"
EVENT_KINDS = {
    Decision.DRAIN: EventKind.SLURM_DRAIN,
    Decision.REBOOT: EventKind.SLURM_REBOOT,
    Decision.REASON: EventKind.SLURM_REASON,
    Decision.RESUME: EventKind.SLURM_RESUME,
    Decision.OVER_BUDGET: EventKind.SLURM_NOT_DRAINED,
    Decision.HELD: EventKind.SLURM_NOT_DRAINED,
    Decision.UNKNOWN: EventKind.SLURM_NOT_DRAINED,
    Decision.REFUSED: EventKind.SLURM_NOT_DRAINED,
}
# What a dry run says it would have done.
WOULD = {
    Decision.DRAIN: "would drain",
    Decision.REBOOT: "would reboot (scontrol reboot ASAP nextstate=RESUME)",
    Decision.REASON: "would update the drain reason to",
    Decision.RESUME: "would resume",
    Decision.OVER_BUDGET: "would not drain",
}
VERBS = {Decision.RESUME: "resume", Decision.REBOOT: "reboot"}
NOT_RECORDED = ""  # DrainRecord.decision once an incident is over


def policy_from_settings() -> Policy:
    return Policy(
        mode=DrainMode(settings.SLURM_DRAIN),
        budget=settings.DRAIN_BUDGET,
        reboot=settings.SLURM_REBOOT,
        resume_sweeps=settings.SLURM_RESUME_SWEEPS,
    )


@dataclass
class PassResult:
    """What one pass did: skipped (and why), or its decisions and their outcomes."""

    skipped: str = ""
    plan: Plan | None = None
    done: list[Step] = field(default_factory=list)  # changed Slurm (mode on)
    recorded: list[Step] = field(default_factory=list)  # reached the nodes' histories
    error: str = ""
    lost_lock: bool = False  # another pass holds the lock now: this one stopped acting


def run_drain_pass(
    client: SlurmClient | None = None,
    now: float | None = None,
    still_held: Callable[[], bool] | None = None,
) -> PassResult:
    """One pass over the whole fleet (see the module docstring). `still_held` renews the
    caller's lock and says whether it still holds it; asked before each command."""
    policy = policy_from_settings()
    if policy.mode is DrainMode.OFF:
        turn_off()
        return PassResult(skipped="MAC_SLURM_DRAIN=off")
    if not slurm_configured():
        link.failed(
            f"no slurm.conf at {settings.SLURM_CONF}: install it on the master, or point "
            "SLURM_CONF at it",
            now,
            unreachable=False,
        )
        return PassResult(skipped="no slurm.conf")
    state = link.load()
    if state and not state.due(now):
        wait = state.retry_at - (now or time.time())
        return PassResult(skipped=f"slurmctld unreachable, next try in {wait:.0f} s")
    client = client or slurm_client()
    try:
        controller = client.ping()
        slurm = {node.name: node for node in client.nodes()}
        reserved = {
            name for reservation in client.reservations() if reservation.active
            for name in reservation.nodes
        }  # fmt: skip
    except SlurmError as exc:
        link.failed(_words(exc), now, unreachable=isinstance(exc, SlurmUnreachable))
        log.warning("drain: Slurm not read, retrying later: %s", _words(exc))
        return PassResult(skipped="slurm unreachable", error=str(exc))
    link.answered(f"slurmctld ({controller.role}) at {controller.host} answers", now)
    try:
        names = NodeNameMap.from_settings()
    except ImproperlyConfigured as exc:  # kept for /health (slurm_node_map) by from_settings
        log.warning("drain: nothing decided: %s", exc)
        return PassResult(skipped="MAC_SLURM_NODE_MAP unreadable", error=str(exc))
    records = {record.node_id: record for record in DrainRecord.objects.all()}
    nodes = load_nodes(names, records)
    decided = plan(nodes, slurm, reserved, policy)
    result = PassResult(plan=decided)
    on = policy.mode is DrainMode.ON
    read = slurm  # as the plan saw it
    steps = act(decided, client, policy, result, records, still_held) if on else decided.steps
    if policy.mode is DrainMode.ON and result.done:
        try:
            slurm = {node.name: node for node in client.nodes()}  # as it is now
        except SlurmError as exc:
            log.warning("drain: Slurm not read again after acting: %s", exc)
    events = record(steps, records, nodes, policy, result)
    if not result.lost_lock:  # else the pass that holds the lock now does it
        follow_holds(nodes, read, records, {step.node.id for step in result.done})
    save_slurm_view(views(nodes, slurm, reserved), events)
    cache.set(VIEW_KEY, True, None)
    budget_state(decided, policy)
    return result


def turn_off() -> None:
    """After MAC_SLURM_DRAIN went back to off: forget the Slurm view, end the budget alert."""
    if not cache.get(VIEW_KEY):
        return
    clear_slurm_view()
    link.forget()
    cache.delete(BUDGET_KEY)
    drainalert.post_budget_alert({"mode": str(DrainMode.OFF), "held_back": []})
    cache.delete(VIEW_KEY)


def needs_pass() -> bool:
    """Whether a pass has anything to do: the drain is on (or dry-run), or was until lately."""
    return settings.SLURM_DRAIN != DrainMode.OFF or bool(cache.get(VIEW_KEY))


def _words(exc: SlurmError) -> str:
    """What /health and the log say of a failure: Slurm's words, after MAC's fix where it
    has one (a refused credential: "slurmctld unreachable" alone would send the operator
    to a slurmctld that runs). The fix first: the link keeps 500 characters."""
    words = f"{' '.join(exc.command)}: {exc.detail}" if exc.detail else str(exc)
    return f"{exc.fix} ({words})" if exc.fix else words


def _written(record: DrainRecord | None) -> str:
    """The reason MAC last wrote into Slurm for the node, where its record says so (kept
    across the refusals that follow it, while MAC holds the node: follow_holds)."""
    return record.wrote if record is not None else ""


def _drained_action(record: DrainRecord | None) -> HealthAction | None:
    """The worst action MAC's drain in effect was for; None where not known."""
    return HealthAction(record.drained_action) if record and record.drained_action else None


def load_nodes(names: NodeNameMap, records: dict[int, DrainRecord]) -> list[MacNode]:
    """Every MAC node with its verdict (inventory.services.node_verdicts), for the plan."""
    nodes = []
    for row in node_verdicts():
        record = records.get(row["id"])
        nodes.append(
            MacNode(
                id=row["id"],
                hostname=row["hostname"],
                slurm_name=names.to_slurm(row["hostname"]),
                state=row["state"],
                action=row["action"],
                evidence=row["evidence"],
                streak=row["streak"],
                since=row["since"].timestamp() if row["since"] else 0.0,
                maintenance=row["maintenance"],
                boot_id=row["boot_id"],
                rebooted_boot=record.rebooted_boot if record else "",
                wrote=_written(record),
                drained_action=_drained_action(record),
                drained_boot=record.drained_boot if record else "",
            )
        )
    return nodes


def act(
    plan_: Plan,
    client: SlurmClient,
    policy: Policy,
    result: PassResult,
    records: dict[int, DrainRecord] | None = None,
    still_held: Callable[[], bool] | None = None,
) -> list[Step]:
    """Carry out the plan's actions; the steps as they turned out (a refusal replaces its step).

    An unreachable controller stops the pass: what is left waits for the next one. So
    does a lost lock (`still_held`, asked before each command): another pass acts now.
    The plan counted on its resumes to make room for its drains; a resume that does not
    happen (refused, held, the pass stopped) makes none, and a drain that needed that room
    is not sent (over_budget): MAC never holds more than MAC_DRAIN_BUDGET.
    """
    outcome: list[Step] = []
    resumes = sum(step.decision is Decision.RESUME for step in plan_.steps)
    in_effect = plan_.drained - len(plan_.taken_out) + resumes  # MAC's drains before acting
    for index, step in enumerate(plan_.steps):
        if step.decision not in ACTIONS:
            outcome.append(step)
            continue
        if step.decision in TAKES_OUT and in_effect >= plan_.limit:
            over = over_budget_step(step.node, step.reason, in_effect, plan_, policy)
            plan_.steps[index] = over  # budget_state names it with the held-back nodes
            outcome.append(over)
            continue
        name = step.node.slurm_name
        if still_held is not None and not still_held():
            # Stalled past the lock's time: another pass took it, read Slurm afresh and
            # acts on what it read. Two passes acting side by side could each drain
            # within the budget and together exceed it, or resume what the other drained.
            result.lost_lock = True
            result.error = "the drain pass's lock was lost to another pass"
            plan_.drained = in_effect
            log.warning("drain: lock lost, stopped before %s %s", step.decision, name)
            outcome.extend(s for s in plan_.steps[index:] if s.decision not in ACTIONS)
            return outcome
        try:
            if step.decision in (Decision.DRAIN, Decision.REASON):
                client.drain(name, step.reason)
            elif step.decision is Decision.REBOOT:
                _note_reboot(step.node, records if records is not None else {})
                client.reboot_asap(name, step.reason)
            else:
                # Slurm was read at the pass's start, seconds ago: someone may have taken
                # the node over since (drained it again with their reason). Asked again.
                now_said = client.node(name)
                if hold_of(now_said) is Hold.NONE:
                    in_effect -= 1
                    continue  # someone resumed it meanwhile: nothing left to do
                if hold_of(now_said) is not Hold.MAC or now_said.reason != step.reason:
                    outcome.append(
                        Step(step.node, Decision.HELD, now_said.reason,
                             f"Not resumed: {name}'s reason changed during the pass "
                             f"({now_said.reason or 'none'}); MAC leaves it as it is")
                    )  # fmt: skip
                    continue
                client.resume(name)
        except SlurmUnknownNode:
            outcome.append(
                Step(step.node, Decision.UNKNOWN, step.reason,
                     f"Not drained: Slurm has no node named {name}; set MAC_SLURM_NODE_MAP "
                     "where the names differ")
            )  # fmt: skip
            continue
        except SlurmCommandRefused as exc:
            verb = VERBS.get(step.decision, "drain")
            fix = f"; {exc.fix}" if exc.fix else ""
            outcome.append(
                Step(step.node, Decision.REFUSED, step.reason,
                     f"Slurm refused to {verb} {name}: {exc.detail}{fix}")
            )  # fmt: skip
            continue
        except SlurmError as exc:
            # slurmctld stopped answering (or the tool went away, or said what we cannot
            # read): stop here; what was done is recorded, what is left waits.
            link.failed(_words(exc))
            plan_.drained = in_effect
            result.error = str(exc)
            log.warning("drain: stopped before %s %s: %s", step.decision, name, _words(exc))
            outcome.extend(s for s in plan_.steps[index:] if s.decision not in ACTIONS)
            return outcome
        log.info("drain: %s %s (%s)", step.decision, name, step.reason)
        if step.decision in TAKES_OUT:
            in_effect += 1
        elif step.decision is Decision.RESUME:
            in_effect -= 1
        result.done.append(step)
        outcome.append(step)
    plan_.drained = in_effect
    return outcome


def _note_reboot(node: MacNode, records: dict[int, DrainRecord]) -> None:
    """The boot MAC asks Slurm to end, kept before it asks: a reboot that slurmctld took
    but whose answer never came (a deadline, a worker killed in between) must not be
    asked a second time for the same boot. `records` gets the row record() goes on with."""
    with contextlib.suppress(IntegrityError):  # the node deregistered during the pass
        records[node.id], _ = DrainRecord.objects.update_or_create(
            node_id=node.id,
            defaults={
                "rebooted_boot": node.boot_id or "?", "rebooted_at": timezone.now(),
                "drained_action": node.action, "drained_boot": node.boot_id,
            },
        )  # fmt: skip


def _same(record_: DrainRecord, key: tuple[str, str, bool]) -> bool:
    """The record says this decision already: a recurring fault that moves only its time
    (XID 119 every few minutes) is not a new refusal to write into the history."""
    decision, reason, dry_run = key
    return (record_.decision, record_.dry_run) == (decision, dry_run) and same_but_times(
        record_.reason, reason
    )


def _message(step: Step, dry_run: bool) -> str:
    name = step.node.slurm_name
    if dry_run and step.decision in WOULD:
        if step.decision is Decision.OVER_BUDGET:
            return f"Dry run: {step.why}"
        target = step.reason if step.decision is not Decision.RESUME else step.why
        return f"Dry run (MAC_SLURM_DRAIN=dry-run): {WOULD[step.decision]} {name}: {target}"
    if step.decision is Decision.DRAIN:
        return f"Drained {name} in Slurm (running jobs finish): {step.reason}"
    if step.decision is Decision.REBOOT:
        return f"Asked Slurm to reboot {name} once empty, then resume it: {step.reason}"
    if step.decision is Decision.REASON:
        return f"Drain reason of {name} updated in Slurm: {step.reason}"
    if step.decision is Decision.RESUME:
        return f"Resumed {name} in Slurm: {step.why}"
    return step.why


def record(
    steps: list[Step],
    records: dict[int, DrainRecord],
    nodes: list[MacNode],
    policy: Policy,
    result: PassResult,
) -> list[NodeEvent]:
    """The steps as events, each decision once per incident; the records and counters kept."""
    dry_run = policy.mode is DrainMode.DRY_RUN
    now = timezone.now()
    events: list[NodeEvent] = []
    decided: set[int] = set()
    for step in steps:
        node = step.node
        decided.add(node.id)
        record_ = records.get(node.id)
        # As the record keeps it: someone else's reason (a held node's) may be longer.
        key = (str(step.decision), step.reason[:REASON_LIMIT], dry_run)
        acted = step.decision in ACTIONS and not dry_run
        if not acted and record_ and _same(record_, key):
            continue  # the same refusal or dry-run decision as last time: said once already
        if record_ is None:
            record_ = records[node.id] = DrainRecord(node_id=node.id)
        record_.decision, record_.reason, record_.dry_run = key
        record_.decided_at = now
        if acted and step.decision in WROTE:
            record_.wrote = key[1]
            _drained_for(record_, node, fresh=step.decision is not Decision.REASON)
        elif acted and step.decision is Decision.RESUME:
            record_.wrote = record_.drained_action = record_.drained_boot = ""
        if step.decision is Decision.REBOOT and not dry_run:
            record_.rebooted_boot, record_.rebooted_at = node.boot_id or "?", now
        try:
            record_.save()
        except IntegrityError:  # the node deregistered during the pass: nothing to record
            records.pop(node.id, None)
            continue
        kind = (
            EventKind.SLURM_DRY_RUN
            if dry_run and step.decision in WOULD
            else EVENT_KINDS[step.decision]
        )
        events.append(
            NodeEvent(
                node_id=node.id,
                hostname=node.hostname,
                kind=kind,
                message=_message(step, dry_run)[:500],
                data={
                    "decision": str(step.decision),
                    "dry_run": dry_run,
                    "slurm_node": node.slurm_name,
                    "reason": step.reason,
                    "why": step.why,
                    "verdict": {"state": str(node.state), "action": str(node.action)},
                },
                actor=ACTOR,
                created_at=now,
            )
        )
        count(step.decision, dry_run)
        result.recorded.append(step)
    # An incident is over when a node needs nothing: its next refusal is news again.
    # The boot MAC asked to reboot is kept until the node is healthy long enough.
    for node in nodes:
        record_ = records.get(node.id)
        if record_ is None or node.id in decided or node.state is HealthState.UNHEALTHY:
            continue
        over = {"decision": NOT_RECORDED, "reason": "", "dry_run": False}
        if node.state is HealthState.HEALTHY and node.streak >= policy.resume_sweeps:
            over |= {"rebooted_boot": "", "rebooted_at": None}
        if any(getattr(record_, name) != value for name, value in over.items()):
            DrainRecord.objects.filter(pk=record_.pk).update(**over)
    return events


def _drained_for(record_: DrainRecord, node: MacNode, fresh: bool) -> None:
    """What MAC's drain of `node` waits for: the worst action it drained for, and the boot
    its fault was seen on ("" where the agent reports none). `fresh`: a new drain (or
    reboot), else MAC's reason of a drain in effect brought up to date (an escalation)."""
    actions = [node.action] if fresh or not record_.drained_action else [
        record_.drained_action, node.action
    ]  # fmt: skip
    record_.drained_action = worst_action(actions)
    record_.drained_boot = node.boot_id


def follow_holds(
    nodes: list[MacNode],
    slurm: dict[str, SlurmNode],
    records: dict[int, DrainRecord],
    acted: set[int],
) -> None:
    """Keep each node's record in step with who held it in Slurm when the pass read it
    (`acted`: the nodes this pass changed, which record() has kept already):

    - out of MAC's hands (resumed by a person, by Slurm after MAC's reboot, drained anew
      by someone else): MAC's words and what its drain waited for are forgotten. Kept,
      a later MAC reason whose evidence moved would look edited by someone, and the node
      would stay drained for good.
    - MAC's, unhealthy: the worst action and the boot the fault is seen on now (the
      fault back after a reboot waits for the next one).
    - MAC's, its drain's boot not known (drained before MAC kept it, or while the agent
      reported none): the node's boot now, so that its next boot frees it.
    """
    for node in nodes:
        found = slurm.get(node.slurm_name)
        if node.id in acted or found is None:
            continue
        record_ = records.get(node.id)
        if hold_of(found) is not Hold.MAC:
            if record_ is not None and (
                record_.wrote or record_.drained_action or record_.drained_boot
            ):
                _keep(records, node, wrote="", drained_action="", drained_boot="")
            continue
        kept = (record_.drained_action, record_.drained_boot) if record_ else ("", "")
        action, boot = kept
        if node.unhealthy:
            action = worst_action([node.action, *([action] if action else [])])
            boot = node.boot_id
        elif not boot:
            boot = node.boot_id
        if (action, boot) != kept:
            _keep(records, node, drained_action=action, drained_boot=boot)


def _keep(records: dict[int, DrainRecord], node: MacNode, **values: str) -> None:
    record_ = records.get(node.id) or DrainRecord(node_id=node.id)
    for name, value in values.items():
        setattr(record_, name, value)
    try:
        if record_.pk is None:
            record_.save()
        else:
            record_.save(update_fields=list(values))
    except IntegrityError:  # the node deregistered during the pass
        records.pop(node.id, None)
        return
    records[node.id] = record_


def views(
    nodes: list[MacNode], slurm: dict[str, SlurmNode], reserved: set[str]
) -> dict[int, tuple[str, str, str]]:
    """Each MAC node's (state, hold, reason) in Slurm, for its row and the dashboards."""
    found = {}
    for node in nodes:
        slurm_node = slurm.get(node.slurm_name)
        if slurm_node is None:
            continue
        in_reservation = slurm_node.name in reserved
        found[node.id] = (
            slurm_state_words(slurm_node, in_reservation),
            str(hold_of(slurm_node)),
            slurm_node.reason,
        )
    return found


# --- the master's figures: counters for /metrics, the budget for /health and the alert ------


def counter_key(decision: Decision | str, dry_run: bool) -> str:
    return f"{COUNTER_PREFIX}{decision}:{'dry-run' if dry_run else 'on'}"


def count(decision: Decision, dry_run: bool) -> None:
    key = counter_key(decision, dry_run)
    cache.add(key, 0, None)
    try:
        cache.incr(key)
    except ValueError:  # evicted between add and incr
        cache.set(key, 1, None)


def decision_counts() -> dict[tuple[str, bool], int]:
    """{(decision, dry_run): decisions recorded since the counters began}, every pair."""
    keys = {
        counter_key(decision, dry): (str(decision), dry)
        for decision in Decision
        for dry in (False, True)
    }
    found = cache.get_many(list(keys))
    return {pair: int(found.get(key) or 0) for key, pair in keys.items()}


def budget_state(decided: Plan, policy: Policy) -> dict:
    """Keep the budget's figures for /health and /metrics, and post or end the alert."""
    held_back = [step.node.hostname for step in decided.over_budget]
    state = {
        "at": time.time(),
        "mode": str(policy.mode),
        "budget": str(policy.budget),
        "fleet": decided.fleet,
        "limit": decided.limit,
        "drained": decided.drained,
        "held_back": held_back,
        "unmonitored": decided.unmonitored,
        "edited": decided.edited,
    }
    cache.set(BUDGET_KEY, state, None)
    drainalert.post_budget_alert(state)
    return state


def last_budget() -> dict | None:
    return cache.get(BUDGET_KEY)
