"""The drain's decision: from the GPU verdicts and Slurm's view, what MAC does to each node.

Pure (no Django, no Slurm call): scheduler.drainpass reads both sides, asks `plan()`, acts
on Slurm and records what happened. The rules, as LBNL NHC and Kubernetes' eviction
budgets taught them (docs/slurm.md, "Draining unhealthy nodes"):

- **Drain** a node whose verdict is unhealthy and that is in service, with the reason
  ``MAC: <evidence>; <action>``: the verdict's own line (contract.verdicts.verdict_line),
  the very words of the node page and the notification. Running jobs finish.
- **Reboot** instead (``scontrol reboot ASAP nextstate=RESUME``) when the action is
  ``reboot`` and the site allows it (MAC_SLURM_REBOOT), once per boot of the node: a
  verdict still read from the boot MAC asked to end is drained, never rebooted again,
  and the same fault back after the reboot is ``inspect_hardware`` (the verdicts
  escalate it), which is drained. MAC cannot reboot-loop a node.
- **Bring the reason up to date** on a node MAC drained whose evidence changed (an
  escalation to inspect_hardware shows in Slurm).
- **Resume** only a node MAC drained (its reason starts with ``MAC:``) whose verdict has
  been healthy for MAC_SLURM_RESUME_SWEEPS sweeps in a row. Degraded is not healthy. A
  drain for an operator's repair (reset_gpu, reboot, inspect_hardware) also needs a boot
  of the node after the last one its fault was seen on: most such faults are events
  (XID 95, an uncorrectable ECC rise) that leave the verdict after the evidence window
  (a counter's rise at once when the agent's exporter restarts), repaired or not. A GPU
  reset MAC cannot see: after one, a person resumes the node (``held`` until then, said
  once).
- **Hands off:** a node that anyone else drained, downed or reserved is never drained
  again, resumed, or given another reason (``held``), and neither is one in MAC's
  maintenance. A reservation counts from ``scontrol show reservation``, which lists it
  at once, not only from the node's RESERVED flag, which slurmctld sets up to 5 s later.
- **Budget:** MAC's drains in effect (nodes whose MAC reason Slurm keeps) plus the new
  ones never exceed MAC_DRAIN_BUDGET of the nodes MAC monitors in Slurm; the oldest
  verdicts go first, the rest are ``over_budget``. A MAC reason someone edited is theirs
  (an RMA that takes weeks) and counts apart, not in the budget.
- A MAC node whose NodeName Slurm does not know is ``unknown`` (fix MAC_SLURM_NODE_MAP).

The same plan serves dry-run: the pass then records what it would have done.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from contract.drainpolicy import DrainBudget, DrainMode
from contract.verdicts import CLOCK_IN_WORDS, OPERATOR_ACTIONS, HealthAction, HealthState
from scheduler.slurm import MAC_REASON_PREFIX, SlurmNode

# Slurm keeps a reason of any length, but sinfo and people read the start of it.
REASON_LIMIT = 500
# What is left of a verdict's time (contract.verdicts.CLOCK_IN_WORDS) where REASON_LIMIT
# cut the line ("... at 14:0").
_CUT_CLOCK = re.compile(r" at[\d: -]*$")
# A cut reason may lose a few trailing spaces (mac_reason strips them, Slurm too).
_CUT_SLACK = 20


class Decision(StrEnum):
    DRAIN = "drain"
    REBOOT = "reboot"
    REASON = "reason"  # MAC's own drain, its reason brought up to date
    RESUME = "resume"
    OVER_BUDGET = "over_budget"  # would drain; the budget is spent
    HELD = "held"  # someone else drained, downed or reserved it: hands off
    UNKNOWN = "unknown"  # Slurm has no node of that name
    REFUSED = "refused"  # Slurm answered no (set by the pass when it acts)


# Decisions that change Slurm (in mode on).
ACTIONS = frozenset({Decision.DRAIN, Decision.REBOOT, Decision.REASON, Decision.RESUME})
# Decisions that take a node out of service (they spend the budget).
TAKES_OUT = frozenset({Decision.DRAIN, Decision.REBOOT})


class Hold(StrEnum):
    """Who keeps a Slurm node out of service (inventory.choices.SlurmHold, value for value)."""

    NONE = ""
    MAC = "mac"
    ADMIN = "admin"


@dataclass(frozen=True)
class Policy:
    """The drain's settings (contract.drainpolicy; macweb.settings reads them)."""

    mode: DrainMode
    budget: DrainBudget
    reboot: bool = False
    resume_sweeps: int = 3


@dataclass(frozen=True)
class MacNode:
    """One node as MAC sees it: its verdict, and what MAC last asked of Slurm for it."""

    id: int
    hostname: str
    slurm_name: str  # the NodeName it maps to (scheduler.config.NodeNameMap)
    state: HealthState
    action: HealthAction
    evidence: str  # the verdict's line, "GPU 3 (...) XID 79: ... at 14:02:11; reboot"
    streak: int  # sweeps in a row that read this state
    since: float  # Unix time the state began
    maintenance: bool = False
    boot_id: str = ""
    rebooted_boot: str = ""  # the boot MAC asked Slurm to reboot ("?" when unknown)
    wrote: str = ""  # the reason MAC last wrote into Slurm for it ("" when not known)
    # MAC's drain in effect (DrainRecord): the worst action it drained for, None where not
    # known (a drain from before MAC kept it); the boot its fault was last seen on, "" where
    # not known (drained then, or the agent reported none).
    drained_action: HealthAction | None = None
    drained_boot: str = ""

    @property
    def unhealthy(self) -> bool:
        return self.state is HealthState.UNHEALTHY


@dataclass(frozen=True)
class Step:
    """One decision about one node: what MAC does (or would do), and the words for it."""

    node: MacNode
    decision: Decision
    reason: str = ""  # the reason MAC writes; for HELD, the holder's own reason
    why: str = ""  # what the node's history says


@dataclass
class Plan:
    """Every decision of one pass, and the budget's figures."""

    steps: list[Step] = field(default_factory=list)
    fleet: int = 0  # MAC's nodes that are Slurm nodes
    limit: int = 0  # the most of them MAC may keep drained
    drained: int = 0  # MAC's drains in effect, this plan's new ones included
    # Slurm nodes MAC drained that no MAC node names any more (deregistered, or mapped
    # elsewhere): MAC never resumes them, and they count in the budget.
    unmonitored: list[str] = field(default_factory=list)
    # Slurm nodes whose MAC reason someone edited ("...; RMA 1234, keep drained"): theirs
    # to resume, so not in `drained`: a few nodes waiting weeks for a repair must not
    # leave new unhealthy nodes in service.
    edited: list[str] = field(default_factory=list)

    @property
    def over_budget(self) -> list[Step]:
        return [step for step in self.steps if step.decision is Decision.OVER_BUDGET]

    @property
    def taken_out(self) -> list[Step]:
        return [step for step in self.steps if step.decision in TAKES_OUT]


def mac_reason(node: MacNode) -> str:
    """``MAC: <evidence>; <action>``: the verdict's line (it ends with its action)."""
    line = " ".join(node.evidence.split())  # one line, whatever the evidence held
    if not line:
        line = f"GPU {node.state}; {node.action}"
    # Slurm keeps the reason without trailing spaces: a cut that ends on one must not
    # make MAC's reason differ from the one Slurm shows, and be written again each pass.
    return f"{MAC_REASON_PREFIX} {line}"[:REASON_LIMIT].rstrip()


def same_but_times(written: str, reason: str) -> bool:
    """Whether two reasons differ at most in their times. A fault that recurs (XID 119
    every few minutes) moves its time, and a new day adds the date: neither is new
    evidence, and writing each into Slurm would add a history event every pass.

    A line longer than REASON_LIMIT is cut, and where the cut falls moves with the times'
    lengths: two cut reasons are the same when one, without its times, begins the other.
    """
    old, new = _untimed(written), _untimed(reason)
    if old == new:
        return True
    both_cut = min(len(written), len(reason)) >= REASON_LIMIT - _CUT_SLACK
    return both_cut and (old.startswith(new) or new.startswith(old))


def _untimed(reason: str) -> str:
    return _CUT_CLOCK.sub("", CLOCK_IN_WORDS.sub(" at", reason)).rstrip()


def hold_of(node: SlurmNode) -> Hold:
    """Who keeps this Slurm node out of service: MAC (its reason), someone else, or nobody."""
    if not node.out_of_service:
        return Hold.NONE
    return Hold.MAC if node.reason_is_mac else Hold.ADMIN


def state_words(node: SlurmNode, reserved: bool = False) -> str:
    """The node's state as sinfo's %T says it, in one word or two."""
    if node.reboot_pending:
        return "reboot pending"
    if node.drain:
        return "drained" if node.drained else "draining"
    if node.down:
        return "down"
    if node.failed:
        return "failing" if node.state in ("allocated", "mixed", "completing") else "failed"
    if reserved or node.reserved:
        return "reserved"
    return node.state


def _held_words(node: SlurmNode, reserved: bool) -> str:
    what = (
        "reserved" if reserved or node.reserved
        else "drained" if node.drain
        else "down" if node.down
        else "set to fail" if node.failed
        else "to be rebooted"
    )  # fmt: skip
    who = f" by {node.reason_user}" if node.reason_user else ""
    said = f": {node.reason}" if node.reason else ""
    return f"{node.name} is {what}{who}{said}"


def plan(
    nodes: Iterable[MacNode],
    slurm: Mapping[str, SlurmNode],
    reserved: Iterable[str],
    policy: Policy,
) -> Plan:
    """Decide what to do with every node (see the module docstring); nothing is done here."""
    reserved = set(reserved)
    nodes = list(nodes)
    result = Plan()
    candidates: list[MacNode] = []
    # Two MAC hosts that name one Slurm node (a typo in MAC_SLURM_NODE_MAP, or short
    # names alike in two domains) would drain it for one and resume it for the other,
    # pass after pass: neither acts on it.
    sharing: dict[str, list[str]] = {}
    for node in nodes:
        sharing.setdefault(node.slurm_name, []).append(node.hostname)
    shared = {name: hosts for name, hosts in sharing.items() if len(hosts) > 1}
    mapped = [node for node in nodes if node.slurm_name in slurm and node.slurm_name not in shared]
    result.fleet = len(mapped)
    result.limit = policy.budget.limit(result.fleet)
    # Every drain of MAC's in effect counts, also on Slurm nodes MAC no longer monitors
    # and on nodes reserved since (still drained with MAC's reason when it ends), but not
    # one whose reason someone edited: that drain is theirs now.
    result.edited = sorted(
        node.slurm_name for node in mapped if _edited(node, slurm[node.slurm_name])
    )
    result.drained = sum(hold_of(node) is Hold.MAC for node in slurm.values())
    result.drained -= len(result.edited)
    named = {node.slurm_name for node in nodes}
    result.unmonitored = sorted(
        name for name, node in slurm.items() if hold_of(node) is Hold.MAC and name not in named
    )
    for node in nodes:
        found = slurm.get(node.slurm_name)
        left = _left_alone(node, found, shared, reserved)
        if left is not None:
            # Said in the node's history where MAC would otherwise have drained it.
            if node.unhealthy and not node.maintenance:
                result.steps.append(Step(node, *left))
            continue
        assert found is not None  # _left_alone answers for a node Slurm does not have
        if node.maintenance:
            continue
        if hold_of(found) is Hold.MAC:
            step = _mac_drained(node, found, policy)
            if step:
                result.steps.append(step)
            continue
        if node.unhealthy:
            candidates.append(node)
    # A node this pass resumes frees its place for one this pass drains (scheduler.drainpass
    # takes the place back where the resume does not happen).
    result.drained -= sum(step.decision is Decision.RESUME for step in result.steps)
    room = max(0, result.limit - result.drained)
    for node in sorted(candidates, key=lambda n: (n.since, n.id)):
        reason = mac_reason(node)
        if room <= 0:
            result.steps.append(over_budget_step(node, reason, result.drained, result, policy))
            continue
        room -= 1
        result.drained += 1
        if _may_reboot(node, policy):
            result.steps.append(Step(node, Decision.REBOOT, reason, reason))
        else:
            result.steps.append(Step(node, Decision.DRAIN, reason, reason))
    return result


def over_budget_step(node: MacNode, reason: str, kept: int, plan_: Plan, policy: Policy) -> Step:
    """The step of a node the budget holds back while MAC keeps `kept` nodes drained."""
    return Step(
        node, Decision.OVER_BUDGET, reason,
        f"Not drained: the drain budget is spent (MAC keeps {kept} of the {plan_.limit} "
        f"nodes MAC_DRAIN_BUDGET={policy.budget} allows of {plan_.fleet} drained); would "
        f"have drained with: {reason}",
    )  # fmt: skip


def _left_alone(
    node: MacNode, found: SlurmNode | None, shared: Mapping[str, list[str]], reserved: set[str]
) -> tuple[Decision, str, str] | None:
    """(decision, reason, why) where MAC must not act on the node in Slurm, else None: its
    Slurm name is another MAC host's too, Slurm has no such node, someone else holds or
    reserved it, or someone added to MAC's own reason."""
    if node.slurm_name in shared:
        hosts = ", ".join(sorted(shared[node.slurm_name]))
        return (
            Decision.UNKNOWN, mac_reason(node),
            f"Not drained: MAC's hosts {hosts} all name Slurm's {node.slurm_name}; give each "
            "its own in MAC_SLURM_NODE_MAP",
        )  # fmt: skip
    if found is None:
        return (
            Decision.UNKNOWN, mac_reason(node),
            f"Not drained: Slurm has no node named {node.slurm_name} (MAC's host "
            f"{node.hostname}); set MAC_SLURM_NODE_MAP where the names differ",
        )  # fmt: skip
    in_reservation = found.name in reserved
    if found.held_by_others or in_reservation:
        return (
            Decision.HELD, found.reason,
            f"Not drained: {_held_words(found, in_reservation)}; MAC leaves a node that "
            "someone else holds as it is",
        )  # fmt: skip
    if _edited(node, found):
        return (
            Decision.HELD, found.reason,
            f"Not changed: {found.name}'s reason is MAC's as someone edited it "
            f"({found.reason}); MAC leaves it, and its resume, to them",
        )  # fmt: skip
    return None


def _edited(node: MacNode, found: SlurmNode) -> bool:
    """A `MAC:` reason that is neither the one MAC last wrote nor the one it would write
    now: someone added to it ("...; RMA 1234, keep drained"). MAC neither overwrites nor
    resumes that. Where MAC's last reason is not known (the node registered anew), the
    prefix alone says whose it is."""
    if hold_of(found) is not Hold.MAC or not node.wrote:
        return False
    return found.reason not in (node.wrote, mac_reason(node))


def _may_reboot(node: MacNode, policy: Policy) -> bool:
    """Reboot only for a reboot verdict, where allowed, and once per boot of the node."""
    if not (policy.reboot and node.action is HealthAction.REBOOT):
        return False
    if not node.rebooted_boot:
        return True
    return bool(node.boot_id) and node.rebooted_boot != node.boot_id


def _mac_drained(node: MacNode, found: SlurmNode, policy: Policy) -> Step | None:
    """A node MAC holds: a newer reason while unhealthy, a resume once healthy long enough
    (and, after a drain for an operator's repair, on a later boot)."""
    if found.reboot_pending:
        return None  # Slurm is rebooting it for MAC; it resumes by itself
    if node.unhealthy:
        reason = mac_reason(node)
        if not same_but_times(found.reason, reason):
            return Step(node, Decision.REASON, reason, reason)
        return None
    if node.state is HealthState.HEALTHY and node.streak >= policy.resume_sweeps:
        if found.down or found.not_responding or found.failed:
            # Slurm took it out on top of MAC's drain (slurmd lost: Slurm keeps a reason it
            # finds): a resume now would be of a node Slurm downed. Once Slurm has it back
            # (ReturnToService), only MAC's drain is left, and MAC resumes it then.
            what = "down" if found.down else "set to fail" if found.failed else "not responding"
            return Step(
                node, Decision.HELD, found.reason,
                f"Not resumed: {found.name} is {what} in Slurm on top of MAC's drain; MAC "
                "resumes it once Slurm has it back in service",
            )  # fmt: skip
        waiting = _not_repaired(node, found)
        if waiting:
            return Step(node, Decision.HELD, found.reason, waiting)
        booted = (
            ", on a boot after the one its fault was last seen on"
            if _needs_boot(node) else ""
        )  # fmt: skip
        return Step(
            node, Decision.RESUME, found.reason,
            f"GPU verdict healthy for {node.streak} sweeps in a row "
            f"(MAC_SLURM_RESUME_SWEEPS={policy.resume_sweeps}){booted}; MAC drained it "
            f"with: {found.reason}",
        )  # fmt: skip
    return None


def _needs_boot(node: MacNode) -> bool:
    """Whether MAC's drain of the node waits for a boot, not only for a healthy verdict: a
    drain for an operator's repair, or for a repair MAC did not record (a drain from
    before it kept them: almost every unhealthy verdict asks for an operator)."""
    return node.drained_action is None or node.drained_action in OPERATOR_ACTIONS


def _not_repaired(node: MacNode, found: SlurmNode) -> str:
    """Why a healthy node MAC drained is not resumed yet, with what to do; "" to resume.

    A verdict that turned healthy on the boot the fault was seen on proves no repair: an
    event (XID 48, 95, 119, an ECC rise) leaves it after MAC_GPU_EVIDENCE_WINDOW, and a
    counter's rise at once when the agent's exporter restarts. A new boot is what MAC can
    see; a GPU reset it cannot, so after one (`mac gpu reset`) a person resumes the node
    (MAC accepts that).
    """
    if not _needs_boot(node):
        return ""
    name = found.name
    drained = f"MAC drained it for {node.drained_action or 'a repair it did not record'}"
    reboot = f"scontrol reboot ASAP nextstate=RESUME {name}"
    resume = f"scontrol update NodeName={name} State=RESUME"
    if not node.boot_id:
        return (
            f"Not resumed: {name}'s agent reports no boot id, so MAC cannot tell whether it "
            f"rebooted since its fault ({drained}); once repaired, reboot it through Slurm "
            f"({reboot}) or resume it yourself ({resume})"
        )
    if not node.drained_boot:
        return (
            f"Not resumed: MAC does not know which boot of {name} its fault was seen on "
            f"({drained} before it kept that, or while the agent reported no boot); it "
            f"resumes the node once healthy after its next boot: reboot it ({reboot}), or "
            f"after a GPU reset without a reboot resume it yourself ({resume})"
        )
    if node.boot_id == node.drained_boot:
        return (
            f"Not resumed: {name} has not booted since its fault was last seen ({drained}): "
            "its GPU verdict may be healthy only because the fault's events aged out "
            "(MAC_GPU_EVIDENCE_WINDOW) or the exporter restarted and forgot an ECC rise; "
            "reboot it "
            f"({reboot}), or after a GPU reset without a reboot resume it yourself ({resume})"
        )
    return ""
