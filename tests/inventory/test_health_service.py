"""inventory.services.health.judge_health on answers an exporter should never give: a GPU
index that is not a small ASCII number is left out, and the rest of the node is judged
and written (before, "²" raised in int() and a 12-digit index overflowed its row)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from contract.verdicts import answer_digest
from healthcheck.sweep import NODE_FIELDS
from inventory.models import Node
from inventory.services.health import HealthChanges, Observation, judge_health, save_health

pytestmark = pytest.mark.django_db

LINE = (
    'mac_gpu_health{{gpu="{index}",UUID="GPU-{index}",serial="",device="{device}",'
    'state="{state}",action="{action}"}} {value}'
)
EVIDENCE = (
    'mac_gpu_health_evidence{{gpu="0",UUID="{uuid}",serial="{serial}",source="{source}",'
    'code="79",detail="GPU has fallen off the bus",state="unhealthy",action="reboot"}} {at}'
)


def gpu(index, device: str = "", state: str = "healthy", action: str = "none") -> str:
    value = {"healthy": 0, "degraded": 1, "unhealthy": 2}[state]
    return LINE.format(index=index, device=device, state=state, action=action, value=value)


def answer(*lines: str) -> bytes:
    """A GPU exporter's verdict answer: these lines and its boot."""
    return "\n".join([*lines, 'mac_node_boot_info{boot_id="b-1"} 1', ""]).encode()


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
    """NVML numbers the GPUs left after one fell off the bus anew: the index MAC calls
    missing was another GPU's, whose minor the exporter now reports under another index."""
    node = make_node(gpu_vendor="nvidia", gpu_count=3)

    sweep({node: answer(gpu(0, "nvidia0"), gpu(1, "nvidia1"), gpu(2, "nvidia2"))})
    sweep({node: answer(gpu(0, "nvidia0"), gpu(1, "nvidia2"))})

    assert list(node.gpus.values_list("index", "minor")) == [(0, 0), (1, 2), (2, None)]
