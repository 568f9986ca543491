"""A master whose munge key is not the cluster's, against a real Slurm 22.05 lab.

slurmctld runs, but takes the client's connections and closes them unanswered; `scontrol
ping` says DOWN as it does for a stopped slurmctld. The client tells the two apart: the
first is SlurmCredentialRefused with its fix, the second stays plain SlurmUnreachable.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from scheduler.slurm import SlurmClient, SlurmCredentialRefused, SlurmUnreachable
from testkit.slurmlab import SlurmLab

pytestmark = [pytest.mark.slurm]


@pytest.fixture(scope="module")
def lab(one_node_lab: SlurmLab) -> SlurmLab:
    return one_node_lab


def _raised(call: Callable[[], object]) -> SlurmUnreachable:
    with pytest.raises(SlurmUnreachable) as raised:
        call()
    return raised.value


@pytest.mark.parametrize("what", ["ping", "jobs", "nodes", "drain"])
def test_another_munge_key_is_told_as_a_refused_credential_with_its_fix(lab, what):
    client = SlurmClient(lab.conf_with_another_munge_key())
    calls = {
        "ping": client.ping,
        "jobs": client.jobs,  # squeue --json: exit 0, "Unspecified error", then the ping
        "nodes": client.nodes,
        "drain": lambda: client.drain("node-1", "MAC: munge test"),  # scontrol update
    }
    started = time.monotonic()
    error = _raised(calls[what])
    assert type(error) is SlurmCredentialRefused, error
    assert "Zero Bytes were transmitted or received" in error.detail, error.detail
    assert "refused this host's credential" in error.fix and "munge.key" in error.fix
    assert time.monotonic() - started < 1.5  # slurmctld says no at once: no timeout waited
    assert lab.node_states() == {"node-1": "idle"}  # nothing reached slurmctld


def test_the_ping_names_what_both_tools_said(lab):
    error = _raised(SlurmClient(lab.conf_with_another_munge_key()).ping)
    assert error.command == ("scontrol", "ping")
    assert error.detail.startswith("primary at ") and " is DOWN; scontrol show config: " in (
        error.detail
    ), error.detail


def test_a_stopped_slurmctld_stays_plainly_unreachable(lab):
    client = SlurmClient(lab.conf, timeout=1.0, ping_timeout=1.0)
    lab.stop_controller()
    try:
        started = time.monotonic()
        down = _raised(client.ping)
        assert time.monotonic() - started < 3  # the ping, then at most ping_timeout more
        updated = _raised(lambda: client.drain("node-1", "MAC: while down"))
    finally:
        lab.start_controller()
    assert type(down) is SlurmUnreachable and down.detail.endswith(" is DOWN"), down.detail
    assert type(updated) is SlurmUnreachable and not updated.fix
    assert client.ping().up
