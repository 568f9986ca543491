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
