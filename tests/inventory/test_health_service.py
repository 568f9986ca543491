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
