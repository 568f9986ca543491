"""What the drain pass records (scheduler.drainpass.record), on the database alone."""

from __future__ import annotations

import pytest

from contract.drainpolicy import DrainBudget, DrainMode
from contract.verdicts import HealthAction, HealthState
from inventory.choices import EventKind
from scheduler.drain import Decision, MacNode, Policy, Step
from scheduler.drainpass import PassResult, load_nodes, record
from scheduler.models import DrainRecord
from testkit.factories import make_node

pytestmark = pytest.mark.django_db
ON = Policy(DrainMode.ON, DrainBudget(share=0.1))


def _mac(node) -> MacNode:
    return MacNode(
        id=node.pk, hostname=node.hostname, slurm_name=node.hostname,
        state=HealthState.UNHEALTHY, action=HealthAction.REBOOT, evidence="XID 79", streak=1,
        since=0.0,
    )  # fmt: skip


def test_an_administrators_long_reason_is_recorded_once_and_stops_nothing():
    held, sick = make_node("gpu-01"), make_node("gpu-02")
    ticket = "drained for ticket 4711: " + "the whole story of the fault, pasted. " * 20
    assert len(ticket) > 500
    steps = [
        Step(_mac(held), Decision.HELD, ticket, f"Not drained: gpu-01 is drained: {ticket}"),
        Step(_mac(sick), Decision.DRAIN, "MAC: XID 79", "MAC: XID 79"),
    ]
    records: dict = {}

    events = record(steps, records, [], ON, PassResult())

    # Both reached the nodes' histories: the long reason did not stop the pass.
    assert [e.kind for e in events] == [EventKind.SLURM_NOT_DRAINED, EventKind.SLURM_DRAIN]
    assert DrainRecord.objects.get(node=held).reason == ticket[:500]
    # The same refusal next pass: said once already.
    assert record(steps[:1], records, [], ON, PassResult()) == []


def test_the_reason_mac_wrote_is_what_the_next_plan_knows():
    node = make_node("gpu-03")
    record([Step(_mac(node), Decision.DRAIN, "MAC: XID 79", "")], {}, [], ON, PassResult())
    records = {r.node_id: r for r in DrainRecord.objects.all()}

    class Names:
        def to_slurm(self, hostname: str) -> str:
            return hostname

    (loaded,) = [n for n in load_nodes(Names(), records) if n.id == node.pk]
    assert loaded.wrote == "MAC: XID 79"


def test_a_reboot_whose_answer_never_came_is_not_asked_again_for_that_boot():
    from scheduler.drain import Plan, _may_reboot
    from scheduler.drainpass import act
    from scheduler.slurm import SlurmUnreachable

    node = make_node("gpu-04")
    sick = MacNode(**{**_mac(node).__dict__, "boot_id": "boot-a"})

    class TimedOut:
        def reboot_asap(self, name: str, reason: str) -> None:
            # slurmctld took it; its answer came too late
            raise SlurmUnreachable(("scontrol", "reboot"), "timed out after 10 s")

    records: dict = {}
    plan_ = Plan(steps=[Step(sick, Decision.REBOOT, "MAC: XID 79", "MAC: XID 79")])
    result = PassResult(plan=plan_)
    steps = act(plan_, TimedOut(), ON, result, records)

    assert steps == [] and "timed out" in result.error  # the pass stopped there
    kept = DrainRecord.objects.get(node=node)
    assert kept.rebooted_boot == "boot-a" and records[node.pk] == kept
    again = MacNode(**{**sick.__dict__, "rebooted_boot": kept.rebooted_boot})
    reboots = Policy(DrainMode.ON, DrainBudget(share=0.1), reboot=True)
    assert _may_reboot(again, reboots) is False  # the next pass drains instead


def test_a_resume_is_not_sent_for_a_node_someone_took_over_during_the_pass():
    from datetime import UTC, datetime

    from scheduler.drain import Plan
    from scheduler.drainpass import act
    from scheduler.slurm import SlurmNode

    node = make_node("gpu-05")
    healed = MacNode(**{**_mac(node).__dict__, "state": HealthState.HEALTHY, "streak": 5})
    ours = "MAC: XID 79"

    class Slurm:
        resumed: list = []

        def __init__(self, reason: str) -> None:
            self.reason = reason

        def node(self, name: str) -> SlurmNode:
            return SlurmNode(name=name, state="idle", flags=frozenset({"DRAIN"}),
                             reason=self.reason, reason_user="ops",
                             reason_time=datetime.now(UTC), gpus=8, boot_time=None,
                             partitions=())  # fmt: skip

        def resume(self, name: str) -> None:
            self.resumed.append(name)

    step = Step(healed, Decision.RESUME, ours, "healthy for 5 sweeps")
    taken = Slurm("RMA 1234: keep drained")  # an administrator's since the pass read Slurm
    [outcome] = act(Plan(steps=[step]), taken, ON, PassResult())
    assert outcome.decision is Decision.HELD and "RMA 1234" in outcome.why
    assert taken.resumed == []
    still = Slurm(ours)
    assert act(Plan(steps=[step]), still, ON, PassResult()) == [step]
    assert still.resumed == ["gpu-05"]


def _slurm_node(name: str, reason: str, flags=("DRAIN",)):
    from datetime import UTC, datetime

    from scheduler.slurm import SlurmNode

    return SlurmNode(name=name, state="idle", flags=frozenset(flags), reason=reason,
                     reason_user="root", reason_time=datetime.now(UTC), gpus=8,
                     boot_time=None, partitions=())  # fmt: skip


class _Names:
    def to_slurm(self, hostname: str) -> str:
        return hostname


def test_an_edited_mac_reason_stays_the_administrators_pass_after_pass():
    from scheduler.drain import plan

    node = make_node("gpu-06")
    ours = "MAC: XID 79"
    record([Step(_mac(node), Decision.DRAIN, ours, ours)], {}, [], ON, PassResult())
    edited = _slurm_node("gpu-06", f"{ours} -- RMA 1234, keep drained")
    for sweep in range(3):  # still unhealthy, now with newer evidence
        records = {r.node_id: r for r in DrainRecord.objects.all()}
        (loaded,) = [n for n in load_nodes(_Names(), records) if n.id == node.pk]
        assert loaded.wrote == ours, sweep  # MAC still knows which words were its own
        sick = MacNode(**{**_mac(node).__dict__, "evidence": "XID 48", "wrote": loaded.wrote})
        [step] = plan([sick], {"gpu-06": edited}, set(), ON).steps
        assert step.decision is Decision.HELD, sweep  # never a REASON over the admin's text
        record([step], records, [sick], ON, PassResult())
    # Healthy for long enough: still theirs to resume.
    records = {r.node_id: r for r in DrainRecord.objects.all()}
    (loaded,) = [n for n in load_nodes(_Names(), records) if n.id == node.pk]
    healed = MacNode(**{**_mac(node).__dict__, "state": HealthState.HEALTHY, "streak": 9,
                        "wrote": loaded.wrote})  # fmt: skip
    assert plan([healed], {"gpu-06": edited}, set(), ON).steps == []
    # MAC's own resume ends what it remembers.
    resumed = Step(healed, Decision.RESUME, ours, "healthy")
    record([resumed], records, [healed], ON, PassResult())
    assert DrainRecord.objects.get(node=node).wrote == ""


def test_a_resume_that_does_not_happen_makes_no_room_for_a_drain():
    from scheduler.drain import plan
    from scheduler.drainpass import act
    from scheduler.slurm import SlurmCommandRefused

    one = Policy(DrainMode.ON, DrainBudget(count=1))
    first, second = make_node("gpu-07"), make_node("gpu-08")
    ours = "MAC: XID 79"
    healed = MacNode(**{**_mac(first).__dict__, "state": HealthState.HEALTHY, "streak": 5,
                        "boot_id": "boot-b", "drained_boot": "boot-a"})  # fmt: skip
    slurm = {"gpu-07": _slurm_node("gpu-07", ours), "gpu-08": _slurm_node("gpu-08", "", ())}
    decided = plan([healed, _mac(second)], slurm, set(), one)
    assert [s.decision for s in decided.steps] == [Decision.RESUME, Decision.DRAIN]

    class Refusing:
        drained: list = []

        def node(self, name: str):
            return slurm[name]

        def resume(self, name: str) -> None:
            raise SlurmCommandRefused(("scontrol", "update"), "Invalid node state specified")

        def drain(self, name: str, reason: str) -> None:
            self.drained.append(name)

    steps = act(decided, Refusing(), one, PassResult(plan=decided))
    assert [s.decision for s in steps] == [Decision.REFUSED, Decision.OVER_BUDGET]
    assert Refusing.drained == []  # gpu-07 is still MAC's drain: no room for gpu-08
    assert "MAC keeps 1 of the 1 nodes" in steps[1].why
    assert decided.drained == 1 and [s.node.hostname for s in decided.over_budget] == ["gpu-08"]
    # A resume that happens makes the room, as planned.
    again = plan([healed, _mac(second)], slurm, set(), one)

    class Resuming(Refusing):
        def resume(self, name: str) -> None:
            pass

    steps = act(again, Resuming(), one, PassResult(plan=again))
    assert [s.decision for s in steps] == [Decision.RESUME, Decision.DRAIN]
    assert Resuming.drained == ["gpu-08"] and again.drained == 1


def test_a_refusal_whose_fault_only_moved_its_time_is_said_once():
    node = make_node("gpu-09")
    at = "MAC: GPU 0 XID 119: GSP RPC timeout at {}; reset_gpu"
    records: dict = {}
    first = Step(_mac(node), Decision.OVER_BUDGET, at.format("14:02:11"), "budget spent")
    assert len(record([first], records, [], ON, PassResult())) == 1
    # The same XID a few minutes later: not news for the history.
    later = Step(_mac(node), Decision.OVER_BUDGET, at.format("14:07:40"), "budget spent")
    assert record([later], records, [], ON, PassResult()) == []
    # Other evidence is.
    other = Step(_mac(node), Decision.OVER_BUDGET, "MAC: GPU 0 XID 79 at 14:09:00; reboot", "x")
    assert len(record([other], records, [], ON, PassResult())) == 1
