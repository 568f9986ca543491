"""A real Slurm lab for the scheduler's tests (testkit.slurmlab), one per test module; for
the drain's, a simulated fleet beside it whose host names are the lab's NodeNames."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from testkit.ports import free_port
from testkit.simfleet import FleetThread, loopback_base
from testkit.slurmlab import SlurmLab, SlurmLabUnavailable, ensure_users, lab_folder
from testkit.waiting import wait_for


@pytest.fixture(scope="module")
def slurm_lab() -> Iterator[SlurmLab]:
    """Three nodes with four GPUs each, slurmdbd for sacct, and the lab's two users.

    In lab_folder(), not tmp_path: the lab's users must reach their job scripts in its
    spool, which pytest's 0700 folder would bar.
    """
    try:
        ensure_users()
        with lab_folder() as root:
            lab = SlurmLab.start(root, ["node-1", "node-2", "node-3"], 4, accounting=True)
            try:
                yield lab
            finally:
                lab.stop()
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))


# --- the drain: a simulated fleet of H200 nodes and a lab whose nodes carry their names ----


@dataclass
class DrainLab:
    """A running simulated fleet and a Slurm lab of the same host names."""

    fleet: FleetThread
    lab: SlurmLab

    def host(self, index: int) -> str:
        return self.fleet.nodes[index].hostname

    def ip(self, index: int) -> str:
        return self.fleet.nodes[index].ip

    def reset(self) -> None:
        """Every simulated node freshly booted and healthy; every lab node back in service."""
        for node in self.fleet.nodes:
            self.fleet.reboot(node.ip)
        for line in self.lab.scontrol("show", "reservation", "-o", check=False).splitlines():
            if line.startswith("ReservationName="):
                name = line.split()[0].split("=", 1)[1]
                self.lab.scontrol("delete", f"ReservationName={name}")

        def in_service() -> bool:
            # A reboot under way, or nodes registering again after slurmctld restarted,
            # cannot be resumed yet: asked again until they are idle.
            states = self.lab.node_states()
            for name, state in states.items():
                if state.startswith(("drain", "down", "fail")):
                    self.lab.scontrol("update", f"NodeName={name}", "State=RESUME", check=False)
            return set(states.values()) == {"idle"}

        wait_for(in_service, 30, 0.2, what="every lab node idle again")


@pytest.fixture(scope="module")
def drain_lab() -> Iterator[DrainLab]:
    """20 simulated 8x H200 nodes (no random faults, GPU events count for a minute) and a
    Slurm lab whose 20 NodeNames are their host names, 8 GPUs each."""
    fleet = FleetThread(
        20, base=loopback_base(), profiles="nvidia=1", fault_rate=0, evidence_window=60
    ).start()
    try:
        with lab_folder() as root:
            lab = SlurmLab.start(root, [node.hostname for node in fleet.nodes], 8)
            try:
                yield DrainLab(fleet, lab)
            finally:
                lab.stop()
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))
    finally:
        fleet.stop()


def register_fleet_nodes(fleet: FleetThread) -> None:
    """Each simulated node registered with the master, as its agent would register."""
    from inventory import services

    for sim in fleet.nodes:
        services.register_node(
            services.Registration(
                hostname=sim.hostname, ip=sim.ip, exporters=sim.exporters(), **sim.registration()
            ),
            source=sim.ip,
        )


@contextmanager
def macs_alertmanager(settings, tmp_path) -> Iterator:
    """Debian's Alertmanager on the configuration MAC writes, at settings.ALERTMANAGER_URL."""
    from alerting import services as alert_services
    from testkit.alerting import AlertmanagerServer

    settings.ALERTMANAGER_DIR = tmp_path / "alertmanager"
    settings.ALERTMANAGER_MANAGED = True
    alert_services.apply_channels(reload=False)
    port = int(settings.ALERTMANAGER_URL.rsplit(":", 1)[1])
    server = AlertmanagerServer(
        alert_services.config_path(), tmp_path / "alertmanager-data", port=port
    ).start()
    try:
        yield server
    finally:
        server.stop()


def clear_drain_keys() -> None:
    """Forget what earlier passes left in the cache: the link, the budget, the counters."""
    from django.core.cache import cache

    from alerting import drainalert
    from scheduler import drainpass, link, tasks
    from scheduler.config import NODE_MAP_ERROR_KEY
    from scheduler.drain import Decision

    counters = [drainpass.counter_key(d, dry) for d in Decision for dry in (False, True)]
    cache.delete_many(
        [link.LINK_KEY, drainpass.BUDGET_KEY, drainpass.VIEW_KEY, drainalert.POSTED_KEY,
         drainalert.ENDED_KEY, tasks.LOCK_KEY, NODE_MAP_ERROR_KEY, *counters]
    )  # fmt: skip


@pytest.fixture
def drain(drain_lab, settings, tmp_path, db) -> Iterator[DrainLab]:
    """The lab's 20 nodes registered and swept once, MAC_SLURM_DRAIN=on at the lab, a 10 %
    budget, and nothing left of another test's passes."""
    from contract.drainpolicy import DrainBudget, DrainMode
    from healthcheck.sweep import run_sweep

    drain_lab.reset()
    clear_drain_keys()
    settings.SLURM_CONF = drain_lab.lab.conf
    settings.SLURM_DRAIN = DrainMode.ON
    settings.DRAIN_BUDGET = DrainBudget(share=0.1)
    settings.SLURM_REBOOT = False
    settings.SLURM_RESUME_SWEEPS = 3
    settings.SLURM_NODE_MAP = ""
    settings.PROBE_TIMEOUT = 1.0
    settings.PROBE_INTERVAL = 1.0
    settings.SD_DIR = tmp_path / "targets"
    # No Alertmanager unless the test starts one: a closed port, never another master's.
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"
    register_fleet_nodes(drain_lab.fleet)
    run_sweep()
    yield drain_lab
    clear_drain_keys()


@pytest.fixture(scope="module")
def one_node_lab() -> Iterator[SlurmLab]:
    """A one-node Slurm lab (no GPUs, no accounting) for the module; skipped without one."""
    try:
        with lab_folder() as root, SlurmLab.start(root, ["node-1"], 0) as running:
            yield running
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))
