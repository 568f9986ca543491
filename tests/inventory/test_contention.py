"""inventory.services.contention: a write the database gave up for a deadlock runs again,
and only outside a caller's transaction."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import OperationalError, connection, transaction

from inventory.models import Node
from inventory.services.contention import atomic_again

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's deadlock detection is the case"
)


def _deadlock(make_node):
    """Two nodes, and another writer that locks the second, then wants the first: the
    work below, which locks the first and then wants the second, is the one PostgreSQL
    gives up (it waits longer: its deadlock_timeout runs out first)."""
    first, second = make_node("gpu-01"), make_node("gpu-02")
    ready = threading.Barrier(2, timeout=10)
    errors: list[Exception] = []

    def other_writer() -> None:
        try:
            with transaction.atomic():
                Node.objects.select_for_update().get(pk=second.pk)
                ready.wait()
                time.sleep(0.6)
                Node.objects.filter(pk=first.pk).update(hostname="gpu-01-other")
        except Exception as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    attempts: list[int] = []

    def work() -> str:
        attempts.append(1)
        Node.objects.select_for_update().get(pk=first.pk)
        if len(attempts) == 1:
            ready.wait()
            time.sleep(0.2)
        Node.objects.filter(pk=second.pk).update(hostname="gpu-02-work")
        return "written"

    thread = threading.Thread(target=other_writer)
    thread.start()
    return first, second, work, attempts, thread, errors


@pytest.mark.django_db(transaction=True)
def test_the_deadlock_victim_runs_again_and_both_writes_land(make_node):
    first, second, work, attempts, thread, errors = _deadlock(make_node)

    assert atomic_again(work, "the test's write") == "written"

    thread.join(10)
    assert errors == [] and len(attempts) == 2
    assert Node.objects.get(pk=first.pk).hostname == "gpu-01-other"
    assert Node.objects.get(pk=second.pk).hostname == "gpu-02-work"


@pytest.mark.django_db(transaction=True)
def test_inside_a_callers_transaction_it_runs_once_and_says_so(make_node):
    _first, _second, work, attempts, thread, errors = _deadlock(make_node)

    with pytest.raises(OperationalError, match="deadlock"), transaction.atomic():
        atomic_again(work, "the test's write")

    thread.join(10)
    assert errors == [] and len(attempts) == 1
