"""inventory.services.health.judge_health and save_health on single answers: an index that
is not a small ASCII number is left out, and the rest of the node is judged and written
(before, "²" raised in int() and a 12-digit index overflowed its row); a GPU the exporter
leaves out is named by its identity, not by the index it had."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from contract.verdicts import answer_digest, slurm_gpu_order
from healthcheck.sweep import NODE_FIELDS
from inventory.models import GpuFault, Node
from inventory.services.health import HealthChanges, Observation, judge_health, save_health

pytestmark = pytest.mark.django_db

LINE = (
    'mac_gpu_health{{gpu="{index}",UUID="{uuid}",serial="{serial}",device="{device}",'
    'state="{state}",action="{action}"}} {value}'
)
EVIDENCE = (
    'mac_gpu_health_evidence{{gpu="0",UUID="{uuid}",serial="{serial}",source="{source}",'
    'code="79",detail="GPU has fallen off the bus",state="unhealthy",action="reboot"}} {at}'
)


def gpu(
    index,
    device: str = "",
    state: str = "healthy",
    action: str = "none",
    uuid: str | None = None,
    serial: str = "",
) -> str:
    value = {"healthy": 0, "degraded": 1, "unhealthy": 2}[state]
    uuid = f"GPU-{index}" if uuid is None else uuid
    return LINE.format(index=index, device=device, state=state, action=action, value=value,
                       uuid=uuid, serial=serial)  # fmt: skip


def answer(*lines: str, boot: str = "b-1") -> bytes:
    """A GPU exporter's verdict answer: these lines and its boot."""
    return "\n".join([*lines, f'mac_node_boot_info{{boot_id="{boot}"}} 1', ""]).encode()


def named(letter: str, index: int, labels: str = "uuid serial") -> str:
    """GPU `letter` (UUID GPU-<letter>, serial S-<letter>, as `labels` say) at `index`, with
    the device file /dev/nvidia<index>."""
    uuid = f"GPU-{letter}" if "uuid" in labels else ""
    serial = f"S-{letter}" if "serial" in labels else ""
    return gpu(index, f"nvidia{index}", uuid=uuid, serial=serial)


def sweep(answers: dict[Node, bytes]) -> HealthChanges:
    """What a sweep does with these nodes' changed answers: judge, then write."""
    rows = list(Node.objects.values(*NODE_FIELDS).filter(pk__in=[n.pk for n in answers]))
    seen = {
        node.pk: Observation(node.pk, True, answer_digest(body), [("nvidia", body, False)])
        for node, body in answers.items()
    }
    now = timezone.now()
    changes = judge_health(rows, seen, now)
    save_health(changes, now)
    return changes


@pytest.mark.parametrize("index", ["\u00b2", "\u0663", "999999999999", "9" * 5000])
def test_a_gpu_index_that_is_no_small_ascii_number_is_left_out(make_node, index):
    node = make_node(gpu_vendor="nvidia", gpu_count=1)

    changes = sweep({node: answer(gpu(0), gpu(index))})

    assert [gpu.index for gpu in changes.gpus[node.pk]] == ["0"]
    assert list(node.gpus.values_list("index", flat=True)) == [0]


@pytest.mark.parametrize(
    ("at", "uuid", "serial", "source"),
    [
        ("NaN", "GPU-0", "", "xid"),
        ("+Inf", "GPU-0", "", "xid"),
        ("1e300", "GPU-0", "", "xid"),
        ("-5", "GPU-0", "", "xid"),
        ("1781000000", "GPU-" + "u" * 200, "s" * 65, "x" * 80),
    ],
)
def test_an_answer_no_column_or_clock_can_hold_is_cut_and_the_sweep_writes(
    make_node, at, uuid, serial, source
):
    """One exporter's NaN time made the evidence's words raise, and a 65-character serial
    failed the write: nothing was committed, the same answer came back each sweep, and the
    whole fleet's sweep stalled on it."""
    node = make_node(gpu_vendor="nvidia", gpu_count=1)
    other = make_node(gpu_vendor="nvidia", gpu_count=1)
    bad = answer(
        gpu(0, state="unhealthy", action="reboot"),
        EVIDENCE.format(uuid=uuid, serial=serial, source=source, at=at),
    )

    sweep({node: bad, other: answer(gpu(0))})

    node.refresh_from_db()
    assert (node.health_state, node.health_action) == ("unhealthy", "reboot")
    assert "fallen off the bus" in node.health_evidence
    (row,) = node.gpus.all()
    assert len(row.uuid) <= 128 and len(row.serial) <= 64
    assert row.evidence[0]["at"] == (1781000000.0 if at == "1781000000" else 0.0)
    assert Node.objects.get(pk=other.pk).gpus.count() == 1


def test_each_gpus_minor_number_is_kept_and_follows_the_answer(make_node):
    node = make_node(gpu_vendor="nvidia", gpu_count=2)

    sweep({node: answer(gpu(0, "nvidia1"), gpu(1, "nvidia0"))})
    assert list(node.gpus.values_list("index", "minor")) == [(0, 1), (1, 0)]
    sweep({node: answer(gpu(0, "nvidia1"), gpu(1, "card0"))})  # no longer said: unknown
    assert list(node.gpus.values_list("index", "minor")) == [(0, 1), (1, None)]


def test_a_gpu_the_exporter_no_longer_reports_keeps_its_minor_number(make_node):
    """Slurm's order of the node's GPUs does not change when one falls off the bus."""
    node = make_node(gpu_vendor="nvidia", gpu_count=2)

    sweep({node: answer(gpu(0, "nvidia1"), gpu(1, "nvidia0"))})
    sweep({node: answer(gpu(0, "nvidia1"))})

    assert list(node.gpus.values_list("index", "minor", "state")) == [
        (0, 1, "healthy"), (1, 0, "unhealthy"),
    ]  # fmt: skip


def test_a_missing_gpus_minor_that_another_gpu_now_reports_is_not_kept(make_node):
    """After the reboot the driver gave GPU C the device file GPU B had: Slurm's order of the
    node's GPUs cannot be told from the minors, and the missing GPU does not claim one."""
    node = make_node(gpu_vendor="nvidia", gpu_count=3)

    sweep({node: answer(named("A", 0), named("B", 1), named("C", 2))})
    sweep({node: answer(named("A", 0), named("C", 1), boot="b-2")})

    rows = list(node.gpus.values_list("index", "uuid", "minor"))
    assert rows == [(0, "GPU-A", 0), (1, "GPU-C", 1), (2, "GPU-B", None)]


def test_a_missing_gpu_whose_device_file_no_gpu_took_keeps_it_for_slurms_order(make_node):
    """The GPUs left kept their device files (no reboot, or a driver that keeps minors):
    Slurm's GPU 1 is still /dev/nvidia1, the missing GPU B, and job attribution maps it so."""
    node = make_node(gpu_vendor="nvidia", gpu_count=3)

    sweep({node: answer(named("A", 0), named("B", 1), named("C", 2))})
    sweep({node: answer(named("A", 0), gpu(1, "nvidia2", uuid="GPU-C", serial="S-C"))})

    minors = dict(node.gpus.values_list("index", "minor"))
    assert minors == {0: 0, 1: 2, 2: 1}
    assert node.gpus.get(index=2).uuid == "GPU-B"
    assert slurm_gpu_order(minors) == [0, 2, 1]  # Slurm's GPU 1 is the exporters' 2: B


@pytest.mark.parametrize(
    ("labels", "b", "c"),
    [
        ("uuid serial", ("GPU-B", "S-B"), ("GPU-C", "S-C")),
        ("uuid", ("GPU-B", ""), ("GPU-C", "")),
        ("serial", ("", "S-B"), ("", "S-C")),
    ],
)
def test_a_gpu_lost_before_a_reboot_is_the_one_named_missing_not_the_one_at_its_index(
    make_node, labels, b, c
):
    """A, B and C at 0, 1 and 2; B is lost and the node reboots; NVML numbers A and C 0 and 1.
    B is missing, not C at index 2: the drain reason, the GPU's row (the alert) and the fault
    history name B's UUID and serial, and C keeps its own at its new index."""
    node = make_node(gpu_vendor="nvidia", gpu_count=3)
    sweep({node: answer(named("A", 0, labels), named("B", 1, labels), named("C", 2, labels))})

    changes = sweep({node: answer(named("A", 0, labels), named("C", 1, labels), boot="b-2")})

    rows = list(node.gpus.values_list("index", "uuid", "serial", "state", "action"))
    assert rows[1:] == [(1, *c, "healthy", "none"), (2, *b, "unhealthy", "reboot")]
    [missing] = [verdict for verdict in changes.gpus[node.pk] if verdict.evidence]
    assert (missing.index, missing.evidence[0].uuid, missing.evidence[0].serial) == ("2", *b)
    assert missing.evidence[0].detail == "missing: the exporter reports 2 of the 3 GPUs registered"
    node.refresh_from_db()  # the line Slurm's drain reason repeats
    assert node.health_evidence.startswith("GPU 2 (") and "missing" in node.health_evidence
    assert all(name in node.health_evidence for name in b if name)
    assert not any(name in node.health_evidence for name in c if name)
    faults = GpuFault.objects.values_list("gpu", "fault", "gpu_index")
    assert list(faults) == [(b[1] or b[0], "missing:missing", 2)]


def test_a_missing_gpu_keeps_its_index_and_first_seen_time_in_the_next_answers(make_node):
    node = make_node(gpu_vendor="nvidia", gpu_count=3)
    sweep({node: answer(named("A", 0), named("B", 1), named("C", 2))})
    sweep({node: answer(named("A", 0), named("C", 1), boot="b-2")})
    first = node.gpus.get(index=2).evidence

    sweep({node: answer(named("A", 0), named("C", 1), "# another answer", boot="b-2")})

    assert node.gpus.get(index=2).evidence == first
    assert node.gpus.get(index=2).uuid == "GPU-B"


def test_a_replaced_gpu_is_not_missing(make_node):
    """A new UUID in the full count is a replacement; with one more GPU gone as well, either
    the replaced one or the other may be the GPU not there, so neither is named."""
    node = make_node(gpu_vendor="nvidia", gpu_count=4)
    sweep({node: answer(named("A", 0), named("B", 1), named("C", 2), named("D", 3))})

    sweep({node: answer(named("A", 0), named("B", 1), named("C", 2), named("E", 3))})
    node.refresh_from_db()
    assert (node.health_state, node.health_evidence) == ("healthy", "")
    assert node.gpus.get(index=3).uuid == "GPU-E"

    sweep({node: answer(named("A", 0), named("B", 1), named("C", 2), named("D", 3))})
    changes = sweep({node: answer(named("A", 0), named("C", 1), named("E", 2), boot="b-2")})
    [missing] = [verdict for verdict in changes.gpus[node.pk] if verdict.evidence]
    assert (missing.index, missing.uuid, missing.serial) == ("3", "", "")
    assert missing.evidence[0].detail == (
        "missing: the exporter reports 3 of the 4 GPUs registered; MAC cannot tell which: "
        "a GPU new to MAC is reported, maybe in its place"
    )
    assert not GpuFault.objects.exists()  # no identity: no history to count


def test_an_exporter_that_names_no_gpu_gets_no_gpu_named_missing(make_node):
    """The agent once said UUIDs and serials, and now says neither: the GPU at the index the
    missing one had is not named for it."""
    node = make_node(gpu_vendor="nvidia", gpu_count=3)
    sweep({node: answer(named("A", 0), named("B", 1), named("C", 2))})

    changes = sweep({node: answer(named("A", 0, ""), named("C", 1, ""), boot="b-2")})

    [missing] = [verdict for verdict in changes.gpus[node.pk] if verdict.evidence]
    assert (missing.index, missing.uuid, missing.serial) == ("2", "", "")
    node.refresh_from_db()
    assert node.health_evidence.startswith(
        "GPU 2 missing: the exporter reports 2 of the 3 GPUs registered; MAC cannot tell "
        "which: the exporter does not name every GPU by UUID or serial"
    )
    assert "S-" not in node.health_evidence and "GPU-" not in node.health_evidence


def test_a_missing_partition_is_named_by_its_gpus_identity(make_node):
    """AMD's CPX partitions of one GPU share its UUID and serial: one left out names it."""
    node = make_node(gpu_vendor="amd", gpu_count=4)
    parts = [("X", 0), ("X", 1), ("Y", 2), ("Y", 3)]
    sweep({node: answer(*(named(letter, index) for letter, index in parts))})

    changes = sweep({node: answer(named("X", 0), named("Y", 1), named("Y", 2), boot="b-2")})

    [missing] = [verdict for verdict in changes.gpus[node.pk] if verdict.evidence]
    assert (missing.index, missing.uuid, missing.serial) == ("3", "GPU-X", "S-X")


def test_a_gpu_never_reported_is_missing_unnamed(make_node):
    node = make_node(gpu_vendor="nvidia", gpu_count=3)

    changes = sweep({node: answer(named("A", 0), named("B", 1))})

    [missing] = [verdict for verdict in changes.gpus[node.pk] if verdict.evidence]
    assert (missing.index, missing.uuid) == ("2", "")
    assert missing.evidence[0].detail.endswith(
        "MAC cannot tell which: every GPU MAC knew is reported"
    )


def test_a_new_boot_starts_the_streak_again_and_the_quiet_nodes_take_one_update(make_node):
    """The streak counts sweeps on the node's current boot, whether the verdict stayed the
    same (the quiet, bulk path) or only its line moved; a node that did not reboot goes on.
    The quiet nodes still take one UPDATE between them, the streak in it."""
    rebooted, sick, steady = (make_node(gpu_vendor="nvidia", gpu_count=1) for _ in range(3))

    def xid(at: str, boot: str) -> bytes:
        lost = EVIDENCE.format(uuid="GPU-0", serial="", source="xid", at=at)
        return answer(gpu(0, state="unhealthy", action="reboot"), lost, boot=boot)

    sweep({rebooted: answer(gpu(0)), sick: xid("1781000000", "b-1"), steady: answer(gpu(0))})
    # New answers (the minor said, the XID's time) on the same boot: the streaks grow.
    again = answer(gpu(0, "nvidia0"))
    sweep({rebooted: again, sick: xid("1781000060", "b-1"), steady: again})
    with CaptureQueriesContext(connection) as queries:
        sweep({
            rebooted: answer(gpu(0), boot="b-2"),
            sick: xid("1781000120", "b-2"),  # back after the reboot: inspect_hardware now
            steady: answer(gpu(0)),
        })  # fmt: skip

    streaks = dict(Node.objects.values_list("id", "health_streak"))
    assert [streaks[n.pk] for n in (rebooted, sick, steady)] == [1, 1, 3]
    assert Node.objects.get(pk=sick.pk).health_action == "inspect_hardware"
    updates = [q["sql"] for q in queries if q["sql"].startswith('UPDATE "inventory_node"')]
    assert len(updates) == 2  # the sick node's row, and the two quiet ones together


def test_another_gpu_at_an_index_has_its_own_since(make_node):
    """GpuHealth.since follows the GPU (its UUID, else its serial), not the index: a board
    swapped in, healthy like the one before, has not been healthy since that one was."""
    node = make_node(gpu_vendor="nvidia", gpu_count=2)

    def since() -> dict[int, object]:
        return dict(node.gpus.values_list("index", "since"))

    sweep({node: answer(named("A", 0), named("B", 1))})
    first = since()
    sweep({node: answer(named("A", 0), named("C", 1), boot="b-2")})
    swapped = since()
    assert swapped[0] == first[0] and swapped[1] > first[1]
    # The agent says no UUID any more: the serial tells that C is still there.
    sweep({node: answer(named("A", 0, "serial"), named("C", 1, "serial"), boot="b-3")})
    assert since() == swapped
    sweep({node: answer(named("A", 0, "serial"), named("D", 1, "serial"), boot="b-4")})
    moved = since()
    assert moved[0] == first[0] and moved[1] > swapped[1]
    # Neither said: nothing tells another GPU.
    sweep({node: answer(named("A", 0, ""), named("E", 1, ""), boot="b-5")})
    assert since() == moved
