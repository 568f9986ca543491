"""/health when the master's munge key is not the cluster's, against a real Slurm lab.

The drain pass's ping fails both when slurmctld is stopped and when it refuses the
master's credential; /health must give the second its fix (the munge key), and leave
the first an outage.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.drainpolicy import DrainMode
from healthcheck.health import run_health_checks
from scheduler import link
from scheduler.drainpass import run_drain_pass
from testkit.slurmlab import SlurmLab
from tests.scheduler.conftest import clear_drain_keys

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


@pytest.fixture(scope="module")
def lab(one_node_lab: SlurmLab) -> SlurmLab:
    return one_node_lab


@pytest.fixture
def drain_on(settings) -> Iterator:
    clear_drain_keys()
    settings.SLURM_DRAIN = DrainMode.ON
    yield settings
    clear_drain_keys()


def _slurm_on_health() -> dict:
    checks = run_health_checks()
    assert "slurm" in checks["degraded"]
    return checks["checks"]["slurm"]


def test_health_gives_a_refused_credential_its_fix_and_an_outage_none(lab, drain_on):
    drain_on.SLURM_CONF = lab.conf_with_another_munge_key()
    assert run_drain_pass().skipped == "slurm unreachable"
    assert link.load().unreachable  # retried later, with the backoff of an outage
    detail = _slurm_on_health()["detail"]
    assert "slurmctld runs but refused this host's credential" in detail, detail
    assert "munge -n | ssh <controller> unmunge" in detail and "/etc/munge/munge.key" in detail
    assert "Zero Bytes were transmitted or received" in detail  # Slurm's own words, kept
    assert "MAC drains and resumes nothing until it answers" in detail

    clear_drain_keys()
    drain_on.SLURM_CONF = lab.conf
    lab.stop_controller()
    try:
        assert run_drain_pass().skipped == "slurm unreachable"
    finally:
        lab.start_controller()
    detail = _slurm_on_health()["detail"]
    assert detail.startswith("slurmctld unreachable for "), detail
    assert "is DOWN" in detail and "munge" not in detail and "credential" not in detail
