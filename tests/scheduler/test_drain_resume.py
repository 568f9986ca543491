"""When MAC resumes a node it drained (scheduler.drain, scheduler.drainpass): whole passes
over the database, against a slurmctld that the test plays (`Slurm`).

A drain for an operator's repair (reset_gpu, reboot, inspect_hardware) resumes only on a
boot after the one its fault was last seen on: the fault's events leave the verdict after
the evidence window, or when the agent's exporter restarts, repaired or not. What MAC
remembers of its drain is forgotten once the node leaves its hands another way.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from contract.drainpolicy import DrainBudget, DrainMode
from contract.verdicts import HealthAction, HealthState, answer_digest
from healthcheck.sweep import NODE_FIELDS, Judgement, save_changes
from inventory.choices import EventKind
from inventory.models import Node, NodeEvent
from inventory.services.health import Observation, judge_health
from scheduler import link
from scheduler.drain import Decision
from scheduler.drainpass import run_drain_pass
from scheduler.models import DrainRecord
from scheduler.slurm import Controller, SlurmNode, SlurmUnreachable
from testkit.factories import make_node
from testkit.ports import free_port
from tests.scheduler.conftest import clear_drain_keys

pytestmark = pytest.mark.django_db

XID95 = "GPU 2 (UUID GPU-2, serial 1652) XID 95: uncontained memory error at {}; reset_gpu"
XID95_AGAIN = (
    "GPU 2 (UUID GPU-2, serial 1652) XID 95: uncontained memory error at 15:10:00, back "
    "after 1 reboot(s); inspect_hardware"
)
SLURM_KINDS = [kind for kind in EventKind.values if kind.startswith("slurm_")]


class Slurm:
    """slurmctld as the pass reads and changes it through SlurmClient; `lose_answer`
    makes the next drain happen in Slurm while its answer never reaches MAC."""

    def __init__(self, *names: str) -> None:
        self.state = {name: ("idle", frozenset(), "") for name in names}
        self.lose_answer = False

    def ping(self) -> Controller:
        return Controller("primary", "head", True)

    def nodes(self) -> list[SlurmNode]:
        return [self.node(name) for name in self.state]

    def node(self, name: str) -> SlurmNode:
        state, flags, reason = self.state[name]
        return SlurmNode(
            name=name, state=state, flags=flags, reason=reason,
            reason_user="root" if reason else None,
            reason_time=datetime.now(UTC) if reason else None, gpus=8, boot_time=None,
            partitions=("gpu",),
        )  # fmt: skip

    def reservations(self) -> list:
        return []

    def drain(self, name: str, reason: str) -> None:
        self.state[name] = ("idle", frozenset({"DRAIN"}), reason)
        if self.lose_answer:
            self.lose_answer = False
            raise SlurmUnreachable(("scontrol", "update"), "timed out after 10 s")

    def resume(self, name: str) -> None:  # MAC's resume, or an administrator's
        self.state[name] = ("idle", frozenset(), "")

    def reboot_asap(self, name: str, reason: str) -> None:
        self.state[name] = ("idle", frozenset({"DRAIN", "REBOOT_REQUESTED"}), reason)

    def reason(self, name: str) -> str:
        return self.state[name][2]


@pytest.fixture
def drain(settings, tmp_path) -> Iterator[None]:
    """MAC_SLURM_DRAIN=on at a slurm.conf that exists (the test plays slurmctld)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\n")
    clear_drain_keys()
    settings.SLURM_CONF = conf
    settings.SLURM_DRAIN = DrainMode.ON
    settings.DRAIN_BUDGET = DrainBudget(count=5)
    settings.SLURM_REBOOT = False
    settings.SLURM_RESUME_SWEEPS = 3
    settings.SLURM_NODE_MAP = ""
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"
    yield
    clear_drain_keys()


def verdict(node: Node, state: HealthState, action: HealthAction, evidence: str = "", *,
            streak: int = 1, boot: str = "boot-a") -> None:  # fmt: skip
    """The node's verdict as a sweep leaves it."""
    Node.objects.filter(pk=node.pk).update(
        health_state=state, health_action=action, health_evidence=evidence,
        health_streak=streak, boot_id=boot,
    )  # fmt: skip


def healthy(node: Node, boot: str = "boot-a", streak: int = 3) -> None:
    verdict(node, HealthState.HEALTHY, HealthAction.NONE, streak=streak, boot=boot)


def swept_healthy(node: Node, boot: str) -> None:
    """One sweep that reads the node's GPU exporter answer a healthy GPU 0 on `boot`, and
    writes as the sweep does (an unchanged answer only grows the streak)."""
    body = (
        'mac_gpu_health{gpu="0",UUID="GPU-0",serial="",state="healthy",action="none"} 0\n'
        f'mac_node_boot_info{{boot_id="{boot}"}} 1\n'
    ).encode()
    row = Node.objects.values(*NODE_FIELDS).get(pk=node.pk)
    seen = Observation(node.pk, True, answer_digest(body), [("nvidia", body, False)])
    now = timezone.now()
    save_changes(Judgement(health=judge_health([row], {node.pk: seen}, now)), now)


def history(node: Node) -> list[NodeEvent]:
    return list(NodeEvent.objects.filter(node=node, kind__in=SLURM_KINDS).order_by("id"))


def kept(node: Node) -> tuple[str, str, str]:
    record = DrainRecord.objects.get(node=node)
    return record.wrote, record.drained_action, record.drained_boot


def drained_for_xid95(slurm: Slurm, node: Node) -> str:
    verdict(node, HealthState.UNHEALTHY, HealthAction.RESET_GPU, XID95.format("14:02:11"))
    assert [str(s.decision) for s in run_drain_pass(slurm).done] == ["drain"]
    reason = slurm.reason("gpu-12")
    assert reason == f"MAC: {XID95.format('14:02:11')}"
    assert kept(node) == (reason, "reset_gpu", "boot-a")
    return reason


def test_a_gpu_reset_fault_that_aged_out_is_not_resumed_until_the_node_boots_again(drain):
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    reason = drained_for_xid95(slurm, node)
    # An hour later (or 90 s after an agent upgrade) the XID has left the verdict, on the
    # same boot: the GPU was never reset.
    healthy(node, streak=3)
    for _ in range(3):
        assert not run_drain_pass(slurm).done
    assert slurm.reason("gpu-12") == reason  # still drained
    [drained, waiting] = history(node)
    assert drained.kind == EventKind.SLURM_DRAIN
    assert waiting.kind == EventKind.SLURM_NOT_DRAINED and waiting.data["decision"] == "held"
    assert waiting.message.startswith(
        "Not resumed: gpu-12 has not booted since its fault was last seen (MAC drained it "
        "for reset_gpu)"
    )
    assert "reboot it (scontrol reboot ASAP nextstate=RESUME gpu-12)" in waiting.message
    assert "resume it yourself (scontrol update NodeName=gpu-12 State=RESUME)" in waiting.message
    # Rebooted, and healthy for 3 sweeps on the new boot: resumed.
    healthy(node, boot="boot-b", streak=3)
    assert [str(s.decision) for s in run_drain_pass(slurm).done] == ["resume"]
    assert slurm.reason("gpu-12") == ""
    resumed = history(node)[-1]
    assert resumed.kind == EventKind.SLURM_RESUME and "on a boot after the one" in resumed.message
    assert kept(node) == ("", "", "")


def test_the_healthy_sweeps_before_a_reboot_do_not_count_on_the_new_boot(drain):
    """The streak counts sweeps on the node's current boot: healthy for 3 sweeps on the
    fault's boot, the node was resumed at the first sweep after its reboot, before the new
    boot had shown anything."""
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    reason = drained_for_xid95(slurm, node)
    for _ in range(3):  # the XID aged out on the fault's boot
        swept_healthy(node, "boot-a")
    assert Node.objects.get(pk=node.pk).health_streak == 3
    assert not run_drain_pass(slurm).done  # held: not booted since its fault
    swept_healthy(node, "boot-b")  # rebooted
    assert Node.objects.get(pk=node.pk).health_streak == 1
    assert not run_drain_pass(slurm).done
    swept_healthy(node, "boot-b")
    assert not run_drain_pass(slurm).done
    assert slurm.reason("gpu-12") == reason
    swept_healthy(node, "boot-b")
    [resumed] = run_drain_pass(slurm).done
    assert str(resumed.decision) == "resume" and slurm.reason("gpu-12") == ""
    assert "healthy for 3 sweeps in a row" in history(node)[-1].message


def test_an_agent_that_reports_no_boot_does_not_restart_the_streak(drain):
    node = make_node("gpu-12")
    for boot in ("boot-a", "boot-a", ""):
        swept_healthy(node, boot)
    assert Node.objects.values_list("health_streak", "boot_id").get(pk=node.pk) == (3, "")
    swept_healthy(node, "boot-a")  # nothing to compare with: the same boot, as far as known
    assert Node.objects.get(pk=node.pk).health_streak == 4


def test_after_a_gpu_reset_an_administrators_resume_ends_macs_drain(drain):
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    drained_for_xid95(slurm, node)
    healthy(node)
    run_drain_pass(slurm)
    slurm.resume("gpu-12")  # sudo nvidia-smi -r -i 2; scontrol update ... State=RESUME
    run_drain_pass(slurm)
    assert kept(node) == ("", "", "")
    assert [e.kind for e in history(node)] == [EventKind.SLURM_DRAIN, EventKind.SLURM_NOT_DRAINED]


def test_the_fault_back_after_a_reboot_waits_for_the_next_boot(drain):
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    drained_for_xid95(slurm, node)
    # Rebooted, and the same fault back in the same words: nothing to write into Slurm,
    # but the boot the fault was seen on moves.
    verdict(node, HealthState.UNHEALTHY, HealthAction.RESET_GPU, XID95.format("15:00:00"),
            boot="boot-b")  # fmt: skip
    assert not run_drain_pass(slurm).done
    assert kept(node)[1:] == ("reset_gpu", "boot-b")
    # Back again on a third boot, escalated: the reason and the action rise.
    verdict(node, HealthState.UNHEALTHY, HealthAction.INSPECT_HARDWARE, XID95_AGAIN, boot="boot-c")
    assert [str(s.decision) for s in run_drain_pass(slurm).done] == ["reason"]
    assert kept(node) == (f"MAC: {XID95_AGAIN}", "inspect_hardware", "boot-c")
    # The XID ages out on that boot: no resume; the hardware is looked at and rebooted.
    healthy(node, boot="boot-c")
    assert not run_drain_pass(slurm).done
    assert "(MAC drained it for inspect_hardware)" in history(node)[-1].message
    healthy(node, boot="boot-d")
    assert [str(s.decision) for s in run_drain_pass(slurm).done] == ["resume"]


def test_a_node_whose_agent_reports_no_boot_is_left_to_a_person(drain):
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    drained_for_xid95(slurm, node)
    healthy(node, boot="")
    run_drain_pass(slurm)
    run_drain_pass(slurm)
    assert slurm.reason("gpu-12").startswith("MAC: ")
    [waiting] = history(node)[1:]
    assert waiting.message.startswith("Not resumed: gpu-12's agent reports no boot id")
    assert "scontrol update NodeName=gpu-12 State=RESUME" in waiting.message


def test_a_drain_from_before_mac_kept_its_boot_resumes_after_the_next_boot(drain):
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    reason = f"MAC: {XID95.format('14:02:11')}"
    slurm.drain("gpu-12", reason)
    # As the migration leaves a record of an older MAC: the words, nothing of the drain.
    DrainRecord.objects.create(node=node, decision="drain", reason=reason, wrote=reason)
    healthy(node, boot="boot-a")
    run_drain_pass(slurm)
    assert kept(node) == (reason, "", "boot-a")  # the boot now stands for the drain's
    run_drain_pass(slurm)
    [waiting] = history(node)
    assert waiting.message.startswith("Not resumed: MAC does not know which boot of gpu-12")
    healthy(node, boot="boot-b")
    assert [str(s.decision) for s in run_drain_pass(slurm).done] == ["resume"]


def test_macs_reboot_resumed_by_slurm_ends_macs_drain(drain, settings):
    settings.SLURM_REBOOT = True
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    xid79 = "GPU 3 (UUID GPU-3, serial 1653) XID 79: GPU has fallen off the bus at 14:02:11; reboot"
    verdict(node, HealthState.UNHEALTHY, HealthAction.REBOOT, xid79)
    assert [str(s.decision) for s in run_drain_pass(slurm).done] == ["reboot"]
    assert kept(node) == (f"MAC: {xid79}", "reboot", "boot-a")
    assert not run_drain_pass(slurm).done  # Slurm reboots it for MAC
    slurm.resume("gpu-12")  # rebooted: nextstate=RESUME
    healthy(node, boot="boot-b", streak=1)
    run_drain_pass(slurm)
    assert kept(node) == ("", "", "")
    assert [e.kind for e in history(node)] == [EventKind.SLURM_REBOOT]


def test_macs_words_are_forgotten_once_someone_resumes_its_drain(drain):
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    drained_for_xid95(slurm, node)
    slurm.resume("gpu-12")  # by hand, while the GPU is still unhealthy
    # This pass drains it again, and slurmctld takes the drain but its answer is lost.
    slurm.lose_answer = True
    verdict(node, HealthState.UNHEALTHY, HealthAction.RESET_GPU, XID95.format("14:07:40"))
    result = run_drain_pass(slurm)
    assert not result.done and "timed out" in result.error
    assert kept(node) == ("", "", "")  # the old words would make the new ones look edited
    # The fault recurs: its time moves, the drain in effect is still MAC's own.
    verdict(node, HealthState.UNHEALTHY, HealthAction.RESET_GPU, XID95.format("14:12:00"))
    run_drain_pass(slurm, now=link.load().retry_at)
    assert [e.data["decision"] for e in history(node)] == ["drain"]  # not "held": not theirs
    healthy(node, boot="boot-b")
    assert [str(s.decision) for s in run_drain_pass(slurm).done] == ["resume"]


def test_an_administrators_drain_over_macs_takes_macs_words_away(drain):
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    drained_for_xid95(slurm, node)
    slurm.drain("gpu-12", "RMA 1234")
    run_drain_pass(slurm)
    assert kept(node) == ("", "", "")
    assert [e.data["decision"] for e in history(node)] == ["drain", "held"]


def test_a_lesser_drain_resumes_on_the_same_boot(drain):
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    verdict(node, HealthState.UNHEALTHY, HealthAction.NONE, "GPU 0 unknown fault; none")
    run_drain_pass(slurm)
    assert kept(node)[1:] == ("none", "boot-a")
    healthy(node)
    assert [str(s.decision) for s in run_drain_pass(slurm).done] == [Decision.RESUME]


def test_a_pass_that_lost_its_lock_resumes_nothing(drain):
    # scheduler.tasks renews the lock before each command; this pass stalled past it.
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    reason = drained_for_xid95(slurm, node)
    healthy(node, boot="boot-b")
    result = run_drain_pass(slurm, still_held=lambda: False)
    assert result.lost_lock and not result.done
    assert slurm.reason("gpu-12") == reason
    assert [str(s.decision) for s in run_drain_pass(slurm, still_held=lambda: True).done] == [
        "resume"
    ]


def test_a_node_map_that_cannot_be_read_stops_the_pass_with_its_words_not_a_traceback(
    drain, settings, tmp_path
):
    """The map's @file is read again at each pass: removed since the start, the pass
    decides nothing and says why (/health: slurm_node_map), and the task does not die."""
    slurm, node = Slurm("gpu-12"), make_node("gpu-12")
    verdict(node, HealthState.UNHEALTHY, HealthAction.RESET_GPU, XID95.format("14:02:11"))
    settings.SLURM_NODE_MAP = f"@{tmp_path / 'gone'}"

    result = run_drain_pass(slurm)

    assert result.skipped == "MAC_SLURM_NODE_MAP unreadable" and not result.done
    assert result.error.startswith(f"MAC_SLURM_NODE_MAP='@{tmp_path / 'gone'}': cannot read ")
    assert slurm.reason("gpu-12") == "" and not history(node)

    (tmp_path / "gone").write_text("GPU-12=gpu-12\n")  # host names in any case, as MAC's
    assert [str(s.decision) for s in run_drain_pass(slurm).done] == ["drain"]
