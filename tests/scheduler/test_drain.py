"""The drain's decision (scheduler.drain.plan) over hand-made verdicts and Slurm nodes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contract.drainpolicy import DrainBudget, DrainMode, parse_drain_budget
from contract.verdicts import HealthAction, HealthState
from scheduler.drain import Decision, Hold, MacNode, Policy, hold_of, mac_reason, plan, state_words
from scheduler.slurm import SlurmNode

XID79 = "GPU 3 (UUID GPU-1, serial 165) XID 79: GPU has fallen off the bus at 14:02:11; reboot"
ON = Policy(DrainMode.ON, DrainBudget(share=0.1), reboot=False, resume_sweeps=3)


def mac(
    index: int,
    state: HealthState = HealthState.HEALTHY,
    action: HealthAction = HealthAction.NONE,
    evidence: str = "",
    **fields,
) -> MacNode:
    values = {
        "id": index,
        "hostname": f"gpu-{index:02d}.dc",
        "slurm_name": f"gpu-{index:02d}",
        "state": state,
        "action": action,
        "evidence": evidence,
        "streak": 1,
        "since": 1000.0 + index,
        "boot_id": "boot-a",
        **fields,
    }
    return MacNode(**values)


def healed(index: int, streak: int, **fields) -> MacNode:
    """Healthy for `streak` sweeps, on a boot after the one MAC drained it on for a reboot."""
    fields = {"drained_action": HealthAction.REBOOT, "drained_boot": "boot-0", **fields}
    return mac(index, streak=streak, **fields)


def sick(index: int, action: HealthAction = HealthAction.REBOOT, **fields) -> MacNode:
    fields.setdefault("evidence", XID79)
    return mac(index, HealthState.UNHEALTHY, action, **fields)


def slurm(
    index: int, state: str = "idle", flags: tuple[str, ...] = (), reason: str = "", user=None
) -> SlurmNode:
    return SlurmNode(
        name=f"gpu-{index:02d}",
        state=state,
        flags=frozenset(flags),
        reason=reason,
        reason_user=user,
        reason_time=datetime(2026, 1, 1, tzinfo=UTC) if reason else None,
        gpus=8,
        boot_time=None,
        partitions=("gpu",),
    )


def cluster(count: int, **changed: SlurmNode) -> dict[str, SlurmNode]:
    nodes = {f"gpu-{i:02d}": slurm(i) for i in range(count)}
    nodes.update({node.name: node for node in changed.values()})
    return nodes


def decisions(result) -> dict[str, Decision]:
    return {step.node.slurm_name: step.decision for step in result.steps}


def test_an_unhealthy_node_in_service_is_drained_with_macs_reason():
    result = plan([sick(1), mac(2)], cluster(3), set(), ON)
    [step] = result.steps
    assert step.decision is Decision.DRAIN
    assert step.reason == f"MAC: {XID79}"
    assert (result.fleet, result.limit, result.drained) == (2, 1, 1)  # MAC monitors 2


def test_the_reason_is_one_line_and_names_the_state_when_evidence_is_missing():
    assert mac_reason(sick(1, evidence="GPU 3 lost\n(again)")) == "MAC: GPU 3 lost (again)"
    assert mac_reason(sick(1, evidence="")) == "MAC: GPU unhealthy; reboot"


def test_healthy_degraded_and_an_applications_xid_are_left_in_service():
    nodes = [
        mac(1),
        mac(2, HealthState.DEGRADED, HealthAction.NONE, "GPU 1 thermal slowdown; none"),
        mac(3, HealthState.HEALTHY, HealthAction.RESTART_APP, "GPU 0 XID 13; restart_app"),
    ]
    assert plan(nodes, cluster(4), set(), ON).steps == []


@pytest.mark.parametrize(
    ("node", "held"),
    [
        (slurm(1, "idle", ("DRAIN",), "disk swap", "alice"), "drained by alice: disk swap"),
        (slurm(1, "down", (), "cable", "root"), "down by root: cable"),
        (slurm(1, "idle", ("RESERVED",)), "reserved"),
        (slurm(1, "down", ("NOT_RESPONDING",), "Not responding", "slurm"), "down by slurm"),
        # an administrator's plain `scontrol reboot`: no drain, the node still theirs
        (slurm(1, "idle", ("REBOOT_REQUESTED",), "firmware", "bob"), "to be rebooted by bob"),
    ],
)
def test_a_node_someone_else_holds_is_never_touched(node, held):
    result = plan([sick(1)], cluster(3, n=node), set(), ON)
    [step] = result.steps
    assert step.decision is Decision.HELD
    assert f"gpu-01 is {held}" in step.why and "MAC leaves" in step.why
    healed = plan([mac(1, streak=99)], cluster(3, n=node), set(), ON)
    assert healed.steps == []  # never resumed either


def test_a_reservation_counts_before_slurmctld_flags_the_node():
    result = plan([sick(1)], cluster(3), {"gpu-01"}, ON)
    assert decisions(result) == {"gpu-01": Decision.HELD}
    assert "gpu-01 is reserved" in result.steps[0].why


def test_resume_only_macs_own_drain_after_n_healthy_sweeps():
    drained = slurm(1, "idle", ("DRAIN",), f"MAC: {XID79}", "root")
    assert plan([mac(1, streak=2)], cluster(3, n=drained), set(), ON).steps == []
    [step] = plan([healed(1, 3)], cluster(3, n=drained), set(), ON).steps
    assert step.decision is Decision.RESUME and "healthy for 3 sweeps" in step.why
    degraded = mac(1, HealthState.DEGRADED, streak=50)
    assert plan([degraded], cluster(3, n=drained), set(), ON).steps == []


def test_an_escalated_verdict_rewrites_only_macs_own_reason():
    drained = slurm(1, "idle", ("DRAIN",), f"MAC: {XID79}", "root")
    worse = "GPU 3 XID 79: GPU has fallen off the bus, back after 1 reboot(s); inspect_hardware"
    node = sick(1, action=HealthAction.INSPECT_HARDWARE, evidence=worse)
    [step] = plan([node], cluster(3, n=drained), set(), ON).steps
    assert step.decision is Decision.REASON and step.reason == f"MAC: {worse}"
    assert plan([sick(1)], cluster(3, n=drained), set(), ON).steps == []  # same words: nothing


def test_a_recurring_fault_moving_its_time_leaves_the_reason_alone():
    drained = slurm(1, "idle", ("DRAIN",), f"MAC: {XID79}", "root")
    later = XID79.replace("14:02:11", "14:09:40")
    assert plan([sick(1, evidence=later)], cluster(3, n=drained), set(), ON).steps == []
    next_day = XID79.replace("14:02:11", "2026-12-04 14:02:11")
    assert plan([sick(1, evidence=next_day)], cluster(3, n=drained), set(), ON).steps == []
    # A long line cut at REASON_LIMIT: the cut falls inside the time, or moves with it.
    long_line = "GPU 3 XID 119: " + "g" * 472 + " at 14:02:11; reboot"
    cut = slurm(1, "idle", ("DRAIN",), mac_reason(sick(1, evidence=long_line)), "root")
    assert cut.reason.endswith(" at 14:0")  # the cut fell inside the time
    for moved in ("14:09:40", "2026-12-04 14:09:40"):
        recurred = sick(1, evidence=long_line.replace("14:02:11", moved))
        assert plan([recurred], cluster(3, n=cut), set(), ON).steps == [], moved
    # More evidence is new words, whatever its time.
    more = later.replace("at 14:09:40", "at 14:09:40 (+1 more)")
    [step] = plan([sick(1, evidence=more)], cluster(3, n=drained), set(), ON).steps
    assert step.decision is Decision.REASON and "(+1 more)" in step.reason


def test_macs_reason_someone_added_to_is_theirs_to_resume():
    wrote = f"MAC: {XID79}"
    edited = slurm(1, "idle", ("DRAIN",), f"{wrote} -- RMA 1234, keep drained", "ops")
    # Healed: MAC resumes its own drain, never the one someone added to.
    back = healed(1, 10, wrote=wrote)
    assert plan([back], cluster(3, n=edited), set(), ON).steps == []
    ours = slurm(1, "idle", ("DRAIN",), wrote, "root")
    [step] = plan([back], cluster(3, n=ours), set(), ON).steps
    assert step.decision is Decision.RESUME
    # Still unhealthy, with new words: MAC's own reason is brought up to date, an edited
    # one is left (and said, once, in the node's history).
    worse = sick(1, action=HealthAction.INSPECT_HARDWARE, evidence="XID 79 again", wrote=wrote)
    [step] = plan([worse], cluster(3, n=edited), set(), ON).steps
    assert step.decision is Decision.HELD and "RMA 1234" in step.why
    [step] = plan([worse], cluster(3, n=ours), set(), ON).steps
    assert step.decision is Decision.REASON
    # MAC's last words unknown (the node registered anew): the prefix says whose it is.
    [step] = plan([healed(1, 10)], cluster(3, n=edited), set(), ON).steps
    assert step.decision is Decision.RESUME


def test_a_reason_cut_at_the_limit_ends_as_slurm_keeps_it():
    words = "x" * 494 + " tail"  # the 500-character cut ends on the space
    reason = mac_reason(sick(1, evidence=words))
    assert len(reason) == 499 and not reason.endswith(" ")
    drained = slurm(1, "idle", ("DRAIN",), reason, "root")  # Slurm keeps it so
    assert plan([sick(1, evidence=words)], cluster(3, n=drained), set(), ON).steps == []


def test_the_budget_counts_macs_drains_in_effect_and_drains_the_oldest_first():
    nodes = [sick(i, since=2000.0 - i) for i in range(5)] + [mac(i) for i in range(5, 20)]
    result = plan(nodes, cluster(20), set(), ON)
    assert result.limit == 2
    drained = [s.node.slurm_name for s in result.steps if s.decision is Decision.DRAIN]
    assert drained == ["gpu-04", "gpu-03"]  # the oldest verdicts
    over = result.over_budget
    assert [s.node.slurm_name for s in over] == ["gpu-02", "gpu-01", "gpu-00"]
    assert "the drain budget is spent (MAC keeps 2 of the 2 nodes" in over[0].why
    assert "MAC_DRAIN_BUDGET=10% allows of 20 drained" in over[0].why
    # One drain of MAC's already in effect leaves room for one more.
    held = slurm(19, "idle", ("DRAIN",), "MAC: GPU 0 lost; reboot", "root")
    again = plan(nodes, cluster(20, n=held), set(), ON)
    assert [s.node.slurm_name for s in again.taken_out] == ["gpu-04"]


@pytest.mark.parametrize(("fleet", "budget", "limit"), [
    (20, "10%", 2), (5, "10%", 1), (19, "10%", 1), (20, "3", 3), (2, "3", 2), (0, "10%", 0),
])  # fmt: skip
def test_the_budgets_limit(fleet, budget, limit):
    assert parse_drain_budget(budget).limit(fleet) == limit


def test_reboot_only_where_allowed_for_a_reboot_verdict_and_once_per_boot():
    rebooting = Policy(DrainMode.ON, DrainBudget(count=5), reboot=True)
    assert decisions(plan([sick(1)], cluster(3), set(), ON)) == {"gpu-01": Decision.DRAIN}
    assert decisions(plan([sick(1)], cluster(3), set(), rebooting)) == {"gpu-01": Decision.REBOOT}
    reset = sick(1, action=HealthAction.RESET_GPU)
    assert decisions(plan([reset], cluster(3), set(), rebooting)) == {"gpu-01": Decision.DRAIN}
    # The boot MAC asked Slurm to end still reports the fault: drained, not rebooted again.
    same_boot = sick(1, rebooted_boot="boot-a")
    assert decisions(plan([same_boot], cluster(3), set(), rebooting)) == {"gpu-01": Decision.DRAIN}
    new_boot = sick(1, rebooted_boot="boot-a", boot_id="boot-b")
    assert decisions(plan([new_boot], cluster(3), set(), rebooting)) == {"gpu-01": Decision.REBOOT}
    unknown_boots = sick(1, rebooted_boot="?", boot_id="")
    assert decisions(plan([unknown_boots], cluster(3), set(), rebooting)) == {
        "gpu-01": Decision.DRAIN
    }


def test_a_reboot_under_way_is_left_to_slurm():
    rebooting = slurm(1, "idle", ("DRAIN", "REBOOT_REQUESTED"), f"MAC: {XID79}", "root")
    assert plan([sick(1, evidence="other words")], cluster(3, n=rebooting), set(), ON).steps == []
    assert plan([mac(1, streak=9)], cluster(3, n=rebooting), set(), ON).steps == []
    assert state_words(rebooting) == "reboot pending" and hold_of(rebooting) is Hold.MAC


def test_a_node_slurm_does_not_know_is_unknown_and_does_not_count_in_the_fleet():
    result = plan([sick(7)], cluster(3), set(), ON)
    [step] = result.steps
    assert step.decision is Decision.UNKNOWN and "Slurm has no node named gpu-07" in step.why
    assert "MAC_SLURM_NODE_MAP" in step.why and result.fleet == 0


def test_maintenance_is_left_alone():
    assert plan([sick(1, maintenance=True)], cluster(3), set(), ON).steps == []
    drained = slurm(1, "idle", ("DRAIN",), f"MAC: {XID79}", "root")
    assert plan([mac(1, maintenance=True, streak=9)], cluster(3, n=drained), set(), ON).steps == []


@pytest.mark.parametrize(("node", "words", "hold"), [
    (slurm(1), "idle", Hold.NONE),
    (slurm(1, "mixed", ("DRAIN",), "MAC: x"), "draining", Hold.MAC),
    (slurm(1, "idle", ("DRAIN",), "MAC: x"), "drained", Hold.MAC),
    (slurm(1, "idle", ("DRAIN",), "swap"), "drained", Hold.ADMIN),
    (slurm(1, "down", (), "cable"), "down", Hold.ADMIN),
    (slurm(1, "idle", ("RESERVED",)), "reserved", Hold.NONE),
])  # fmt: skip
def test_what_the_dashboard_shows_of_a_slurm_node(node, words, hold):
    assert (state_words(node), hold_of(node)) == (words, hold)


def test_two_hosts_that_name_one_slurm_node_neither_drain_nor_resume_it():
    # gpu-01.dc1 and gpu-01.dc2 both map to gpu-01 (short names alike, or a map's typo)
    one = sick(1, hostname="gpu-01.dc1")
    other = mac(1, hostname="gpu-01.dc2", streak=10)
    drained = slurm(1, "idle", ("DRAIN",), mac_reason(one), "root")
    result = plan([one, other], cluster(3, n=drained), set(), ON)
    [step] = result.steps
    assert step.decision is Decision.UNKNOWN and step.node is one
    assert "gpu-01.dc1, gpu-01.dc2 all name Slurm's gpu-01" in step.why
    assert result.fleet == 0  # and it counts in nobody's budget


def test_a_node_resumed_in_this_pass_frees_its_place_in_the_budget():
    # 20 nodes, a budget of 2: one of MAC's two drains heals as another GPU fails
    back = slurm(1, "idle", ("DRAIN",), f"MAC: {XID79}", "root")
    still = slurm(2, "idle", ("DRAIN",), f"MAC: {XID79}", "root")
    nodes = [mac(0), healed(1, 5), sick(2), sick(3)] + [mac(i) for i in range(4, 20)]
    result = plan(nodes, cluster(20, n=back, m=still), set(), ON)
    decisions = {s.node.slurm_name: s.decision for s in result.steps}
    assert decisions == {"gpu-01": Decision.RESUME, "gpu-03": Decision.DRAIN}
    assert result.drained == 2 and result.over_budget == []


def test_macs_drains_on_nodes_mac_no_longer_monitors_are_named():
    from scheduler.health import check_budget

    gone = slurm(7, "idle", ("DRAIN",), f"MAC: {XID79}", "root")  # deregistered for an RMA
    nodes = [mac(i) for i in range(20) if i != 7]
    result = plan(nodes, cluster(20, n=gone), set(), ON)
    assert result.unmonitored == ["gpu-07"] and result.drained == 1 and result.steps == []
    ok, words = check_budget(
        {"mode": "on", "budget": "10%", "fleet": result.fleet, "limit": result.limit,
         "drained": result.drained, "held_back": [], "unmonitored": result.unmonitored}
    )  # fmt: skip
    assert ok
    assert (
        "1 of them on Slurm nodes MAC no longer monitors, which it never resumes: gpu-07" in words
    )
    assert "scontrol update NodeName=gpu-07 State=RESUME" in words


def test_macs_drain_on_a_node_reserved_since_still_counts_in_the_budget():
    one = Policy(DrainMode.ON, DrainBudget(count=1))
    ours = slurm(1, "idle", ("DRAIN", "RESERVED"), f"MAC: {XID79}", "root")
    result = plan([sick(1), sick(2)], cluster(5, a=ours), {"gpu-01"}, one)
    # gpu-01 stays MAC's drain when the reservation ends: the budget has no room for gpu-02.
    assert result.drained == 1
    assert decisions(result) == {"gpu-01": Decision.HELD, "gpu-02": Decision.OVER_BUDGET}


@pytest.mark.parametrize(
    ("state", "flags", "words"),
    [
        ("down", ("DRAIN", "NOT_RESPONDING"), "is down in Slurm on top of MAC's drain"),
        ("idle", ("DRAIN", "NOT_RESPONDING"), "is not responding in Slurm on top of"),
        ("idle", ("DRAIN", "FAIL"), "is set to fail in Slurm on top of MAC's drain"),
    ],
)
def test_a_node_slurm_took_out_over_macs_drain_is_not_resumed(state, flags, words):
    # slurmd lost on a node MAC drained: Slurm downs it and keeps the reason it finds.
    downed = slurm(1, state, flags, f"MAC: {XID79}", "root")
    node = healed(1, 5)
    [step] = plan([node], cluster(3, a=downed), set(), ON).steps
    assert step.decision is Decision.HELD and words in step.why
    assert step.why.startswith("Not resumed: gpu-01 is ")
    # Back in service in Slurm (ReturnToService): only MAC's drain is left, resumed.
    back = slurm(1, "idle", ("DRAIN",), f"MAC: {XID79}", "root")
    [step] = plan([node], cluster(3, a=back), set(), ON).steps
    assert step.decision is Decision.RESUME


def test_a_node_set_to_fail_is_someone_elses():
    failed = slurm(1, "idle", ("FAIL",), "PSU fan", "ops")
    assert hold_of(failed) is Hold.ADMIN and state_words(failed) == "failed"
    assert state_words(slurm(1, "mixed", ("FAIL",), "PSU fan", "ops")) == "failing"
    [step] = plan([sick(1)], cluster(3, a=failed), set(), ON).steps
    assert step.decision is Decision.HELD
    assert step.why.startswith("Not drained: gpu-01 is set to fail by ops: PSU fan")


@pytest.mark.parametrize("action", [
    HealthAction.RESET_GPU, HealthAction.REBOOT, HealthAction.INSPECT_HARDWARE, None,
])  # fmt: skip
def test_a_drain_for_a_repair_resumes_only_on_a_later_boot(action):
    # None: a drain from before MAC kept what it drained for, taken as an operator's.
    drained = slurm(1, "idle", ("DRAIN",), f"MAC: {XID79}", "root")
    same_boot = mac(1, streak=9, drained_action=action, drained_boot="boot-a")
    [step] = plan([same_boot], cluster(3, n=drained), set(), ON).steps
    assert step.decision is Decision.HELD and step.reason == f"MAC: {XID79}"
    assert step.why.startswith("Not resumed: gpu-01 has not booted since its fault was last seen")
    later_boot = mac(1, streak=3, drained_action=action, drained_boot="boot-0")
    [step] = plan([later_boot], cluster(3, n=drained), set(), ON).steps
    assert step.decision is Decision.RESUME
    assert "on a boot after the one its fault was last seen on" in step.why


def test_a_drain_for_a_lesser_action_resumes_on_the_same_boot():
    drained = slurm(1, "idle", ("DRAIN",), "MAC: GPU 0 unknown; none", "root")
    node = mac(1, streak=3, drained_action=HealthAction.NONE, drained_boot="boot-a")
    [step] = plan([node], cluster(3, n=drained), set(), ON).steps
    assert step.decision is Decision.RESUME and "boot" not in step.why


@pytest.mark.parametrize(("boot", "drained_boot", "words"), [
    ("", "boot-a", "Not resumed: gpu-01's agent reports no boot id"),
    ("boot-a", "", "Not resumed: MAC does not know which boot of gpu-01"),
])  # fmt: skip
def test_a_reboot_mac_cannot_see_is_left_to_a_person(boot, drained_boot, words):
    drained = slurm(1, "idle", ("DRAIN",), f"MAC: {XID79}", "root")
    node = mac(1, streak=9, boot_id=boot, drained_action=HealthAction.REBOOT,
               drained_boot=drained_boot)  # fmt: skip
    [step] = plan([node], cluster(3, n=drained), set(), ON).steps
    assert step.decision is Decision.HELD and step.why.startswith(words)
    assert "scontrol update NodeName=gpu-01 State=RESUME" in step.why
    assert "scontrol reboot ASAP nextstate=RESUME gpu-01" in step.why


def test_a_mac_reason_someone_edited_counts_apart_from_the_budget():
    from scheduler.health import check_budget

    one = Policy(DrainMode.ON, DrainBudget(count=1))
    ours = f"MAC: {XID79}"
    rma = slurm(1, "idle", ("DRAIN",), f"{ours} -- RMA 1234, keep drained", "ops")
    result = plan([sick(1, wrote=ours), sick(2)], cluster(5, a=rma), set(), one)
    # Theirs until they resume it (weeks, for an RMA): the new fault still gets drained.
    assert decisions(result) == {"gpu-01": Decision.HELD, "gpu-02": Decision.DRAIN}
    assert result.edited == ["gpu-01"] and result.drained == 1
    ok, words = check_budget(
        {"mode": "on", "budget": "1", "fleet": result.fleet, "limit": result.limit,
         "drained": result.drained, "held_back": [], "unmonitored": [],
         "edited": result.edited}
    )  # fmt: skip
    assert ok and words == (
        "MAC keeps 1 of the 1 nodes MAC_DRAIN_BUDGET=1 allows of 2 drained; not counted: "
        "gpu-01 drained with MAC's reason as someone edited it, theirs to resume"
    )
    # MAC's last words unknown: the prefix decides, and it counts.
    again = plan([sick(1), sick(2)], cluster(5, a=rma), set(), one)
    assert again.edited == [] and decisions(again)["gpu-02"] is Decision.OVER_BUDGET
