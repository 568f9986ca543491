"""inventory.services.health.judge_health on answers an exporter should never give: a GPU
index that is not a small ASCII number is left out, and the rest of the node is judged
and written (before, "²" raised in int() and a 12-digit index overflowed its row)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from contract.verdicts import answer_digest
from healthcheck.sweep import NODE_FIELDS
from inventory.models import Node
from inventory.services.health import Observation, judge_health, save_health

pytestmark = pytest.mark.django_db

LINE = (
    'mac_gpu_health{{gpu="{index}",UUID="GPU-{index}",serial="",state="{state}",'
    'action="{action}"}} {value}'
)


def answer(*gpus: tuple[str, str, str, int]) -> bytes:
    lines = [LINE.format(index=i, state=s, action=a, value=v) for i, s, a, v in gpus]
    return "\n".join([*lines, 'mac_node_boot_info{boot_id="b-1"} 1', ""]).encode()


@pytest.mark.parametrize("index", ["\u00b2", "\u0663", "999999999999", "9" * 5000])
def test_a_gpu_index_that_is_no_small_ascii_number_is_left_out(make_node, index):
    node = make_node(gpu_vendor="nvidia", gpu_count=1)
    body = answer(("0", "healthy", "none", 0), (index, "healthy", "none", 0))
    row = Node.objects.values(*NODE_FIELDS).get(pk=node.pk)
    seen = Observation(node.pk, True, answer_digest(body), [("nvidia", body, False)])
    now = timezone.now()

    changes = judge_health([row], {node.pk: seen}, now)
    save_health(changes, now)

    assert [gpu.index for gpu in changes.gpus[node.pk]] == ["0"]
    assert list(node.gpus.values_list("index", flat=True)) == [0]


EVIDENCE = (
    'mac_gpu_health_evidence{{gpu="0",UUID="{uuid}",serial="{serial}",source="{source}",'
    'code="79",detail="GPU has fallen off the bus",state="unhealthy",action="reboot"}} {at}'
)


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
    bad = "\n".join(
        [
            LINE.format(index="0", state="unhealthy", action="reboot", value=2),
            EVIDENCE.format(uuid=uuid, serial=serial, source=source, at=at),
            'mac_node_boot_info{boot_id="b-1"} 1',
            "",
        ]
    ).encode()
    good = answer(("0", "healthy", "none", 0))
    rows = list(Node.objects.values(*NODE_FIELDS).filter(pk__in=[node.pk, other.pk]))
    seen = {
        node.pk: Observation(node.pk, True, answer_digest(bad), [("nvidia", bad, False)]),
        other.pk: Observation(other.pk, True, answer_digest(good), [("nvidia", good, False)]),
    }
    now = timezone.now()

    save_health(judge_health(rows, seen, now), now)

    node.refresh_from_db()
    assert (node.health_state, node.health_action) == ("unhealthy", "reboot")
    assert "fallen off the bus" in node.health_evidence
    (gpu,) = node.gpus.all()
    assert len(gpu.uuid) <= 128 and len(gpu.serial) <= 64
    assert gpu.evidence[0]["at"] == (1781000000.0 if at == "1781000000" else 0.0)
    assert Node.objects.get(pk=other.pk).gpus.count() == 1


def test_each_gpus_minor_number_is_kept_and_follows_the_answer(make_node):
    node = make_node(gpu_vendor="nvidia", gpu_count=2)

    def sweep(minors: tuple[str, str]) -> None:
        lines = [
            f'mac_gpu_health{{gpu="{i}",UUID="GPU-{i}",device="{device}",state="healthy",'
            f'action="none"}} 0'
            for i, device in enumerate(minors)
        ]
        body = "\n".join([*lines, 'mac_node_boot_info{boot_id="b-1"} 1', ""]).encode()
        row = Node.objects.values(*NODE_FIELDS).get(pk=node.pk)
        seen = Observation(node.pk, True, answer_digest(body), [("nvidia", body, False)])
        now = timezone.now()
        save_health(judge_health([row], {node.pk: seen}, now), now)

    sweep(("nvidia1", "nvidia0"))
    assert list(node.gpus.values_list("index", "minor")) == [(0, 1), (1, 0)]
    sweep(("nvidia1", "card0"))  # no longer said: unknown, not the old one
    assert list(node.gpus.values_list("index", "minor")) == [(0, 1), (1, None)]


def test_a_gpu_the_exporter_no_longer_reports_keeps_its_minor_number(make_node):
    """Slurm's order of the node's GPUs does not change when one falls off the bus."""
    node = make_node(gpu_vendor="nvidia", gpu_count=2)
    line = 'mac_gpu_health{{gpu="{i}",UUID="GPU-{i}",device="nvidia{m}",state="healthy",action="none"}} 0'  # noqa: E501
    for pairs in (((0, 1), (1, 0)), ((0, 1),)):
        lines = [line.format(i=i, m=m) for i, m in pairs]
        body = "\n".join([*lines, 'mac_node_boot_info{boot_id="b-1"} 1', ""]).encode()
        row = Node.objects.values(*NODE_FIELDS).get(pk=node.pk)
        seen = Observation(node.pk, True, answer_digest(body), [("nvidia", body, False)])
        now = timezone.now()
        save_health(judge_health([row], {node.pk: seen}, now), now)

    assert list(node.gpus.values_list("index", "minor", "state")) == [
        (0, 1, "healthy"), (1, 0, "unhealthy"),
    ]  # fmt: skip


def test_a_missing_gpus_minor_that_another_gpu_now_reports_is_not_kept(make_node):
    """NVML numbers the GPUs left after one fell off the bus anew: the index MAC calls
    missing was another GPU's, whose minor the exporter now reports under another index."""
    node = make_node(gpu_vendor="nvidia", gpu_count=3)
    line = 'mac_gpu_health{{gpu="{i}",UUID="GPU-{i}",device="nvidia{m}",state="healthy",action="none"}} 0'  # noqa: E501
    for pairs in (((0, 0), (1, 1), (2, 2)), ((0, 0), (1, 2))):
        lines = [line.format(i=i, m=m) for i, m in pairs]
        body = "\n".join([*lines, 'mac_node_boot_info{boot_id="b-1"} 1', ""]).encode()
        row = Node.objects.values(*NODE_FIELDS).get(pk=node.pk)
        seen = Observation(node.pk, True, answer_digest(body), [("nvidia", body, False)])
        now = timezone.now()
        save_health(judge_health([row], {node.pk: seen}, now), now)

    assert list(node.gpus.values_list("index", "minor")) == [(0, 0), (1, 2), (2, None)]
