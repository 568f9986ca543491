"""Faults of scale-out mode's engines under the process runtime (issue 31).

The fault run of the single-Prometheus mode (tests/macweb/test_bulkhead_faults.py,
tests/maccli/test_master_faults.py), repeated for the engines: one `mac start master`
with MAC_SCRAPE_SHARDS=2 over a few simulated nodes serves every case, whose store
keeps its data on a small tmpfs of its own (as root) so that its disk can be filled.
Each case kills (-9) or freezes (SIGSTOP) an engine, or fills the store's disk, while
testkit.enginefaults watches /health and the login page: both answer all along, never
waiting on the engine; /health names the engine, supervision brings it back by itself,
and every scrape made while the store was away reaches it afterwards (the scrapers'
on-disk buffer).

Each case prints its figures; docs/operations.md ("Faults of the scale-out engines")
keeps them.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scraping.engines import CHECK_TIMEOUT
from testkit.alertstack import AlertStack
from testkit.enginefaults import (
    Figure,
    FrontDoorWatch,
    ask,
    freeze_then_kill,
    lost_scrapes,
)
from testkit.ports import free_port
from testkit.simfleet import FleetThread, loopback_base, register_fleet
from testkit.waiting import wait_for
from tests.maccli.test_scaleout import _free_pair

NODES = 4
SHARDS = 2
SCRAPE = 2.0  # MAC_SCRAPE_INTERVAL, seconds
# /health and the fleet page with a scraper frozen answer from the cached check, never
# waiting on the engine: asking the frozen scraper would take the check's own timeout.
# (How fast they answer is a benchmark's figure, kept in FIGURES, not a test's bound.)
ENGINE_WAIT = CHECK_TIMEOUT
# The fleet page then: under the 2 s an engine check waited for before it was cached.
FLEET_PAGE_WITHIN = 1.5
STORE_DISK = "192m"
MIN_FREE = 64 * 2**20  # MAC_METRICS_MIN_FREE_BYTES: /health warns below it
LEFT_FREE = 4 * 2**20  # what filling leaves: under the store's own 10 MB floor

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not all(shutil.which(b) for b in ("victoria-metrics", "vmagent", "vmalert", "nginx")),
        reason="Debian's victoria-metrics (store, vmagent, vmalert) and nginx are needed",
    ),
]
FIGURES: list[Figure] = []


class Engines:
    def __init__(self, master: AlertStack, store_disk: Path | None, nodes: list[int]) -> None:
        self.master, self.store_disk = master, store_disk
        # The simulated nodes' sys-exporter series (not the master's own, nor another's).
        self.selector = f'up{{job="sys-exporter",node=~"{"|".join(map(str, nodes))}"}}'

    @property
    def store(self) -> str:
        return f"http://127.0.0.1:{self.master.settings['MAC_METRICS_STORE_PORT']}"

    def query(self, promql: str, at: float) -> dict:
        query = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        return self.master.get_json(f"{self.store}/api/v1/query?{query}", timeout=20)

    def pid(self, service: str) -> int:
        return self.master.service_pid(service)

    def restarted(self, service: str, old: int) -> bool:
        """Supervision runs `service` again, as another process that answers."""
        shown = self.master.mac("status", "master", timeout=60)
        # The services' table comes first (the scrapers' share lines after it).
        rows = [line.split() for line in shown.stdout.splitlines()]
        row = next((cells for cells in rows if cells[:1] == [service]), [])
        return row[1:3] == ["running", "ok"] and self.pid(service) != old

    def lost(self, start: float, end: float) -> int:
        """Scrapes of the nodes' sys-exporter missing from the store between the two."""
        wait_for(
            lambda: self._newest() >= end + 2 * SCRAPE,
            timeout=90,
            what="the store holding samples past the window",
        )
        return lost_scrapes(self.query, self.selector, NODES, (start, end), SCRAPE)

    def _newest(self) -> float:
        answer = self.query(f"timestamp({self.selector})", time.time())
        values = [float(s["value"][1]) for s in answer["data"]["result"]]
        return min(values) if len(values) == NODES else 0.0


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> Iterator[Engines]:
    root = Path(tmp_path_factory.mktemp("scale-faults"))
    store_disk = None
    if os.geteuid() == 0:
        # The store's folder (maccli.master.scaleout.store_data) on a small disk of its own.
        store_disk = root / "data" / "scaleout" / "store"
        store_disk.mkdir(parents=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={STORE_DISK}", "tmpfs", str(store_disk)],
            check=True,
        )
    fleet = FleetThread(NODES, base=loopback_base()).start()
    master = AlertStack(
        root,
        {
            "MAC_SCRAPE_SHARDS": str(SHARDS),
            "MAC_METRICS_STORE_PORT": str(free_port()),
            "MAC_SCRAPER_BASE_PORT": str(_free_pair()),
            "MAC_RULES_PORT": str(free_port()),
            "MAC_PROBE_INTERVAL": "5",
            "MAC_PROBE_TIMEOUT": "1",
            "MAC_SCRAPE_INTERVAL": f"{SCRAPE:g}s",
            "MAC_METRICS_MIN_FREE_BYTES": str(MIN_FREE),
        },
    )
    try:
        master.start()
        registered, errors = asyncio.run(register_fleet(fleet.fleet, master.url))
        assert registered == NODES and not errors
        hosts = {node.hostname for node in fleet.nodes}
        listed = master.admin().get_json("/api/v1/nodes/?limit=100")["results"]
        stack = Engines(master, store_disk, [n["id"] for n in listed if n["hostname"] in hosts])
        wait_for(
            # The store shows a sample 5 s after it came (-search.latencyOffset).
            lambda: stack._newest() > time.time() - 5 - 3 * SCRAPE,
            timeout=120,
            interval=1,
            what="every node's samples in the store",
        )
        wait_for(
            lambda: all(c["ok"] for c in master.get_json(f"{master.url}/health")["checks"].values()
                        if c), timeout=60, what="a healthy master",
        )  # fmt: skip
        yield stack
    finally:
        master.stop()
        fleet.stop()
        if store_disk is not None:
            subprocess.run(["umount", "-l", str(store_disk)], check=False)
        print("\n| fault | detected | recovered | slowest /health / login | scrapes lost | |")
        for figure in FIGURES:
            print(figure.row())


def _kill(engines: Engines, service: str, check: str, says: str, fault: str) -> Figure:
    """kill -9 an engine; it is named, restarted by supervision, well again.

    Frozen first (SIGSTOP), as test_scaleout.py and test_master_faults.py do: supervision
    restarts a killed engine within a second or so, less than the checks' period, so the
    engine is held away until /health has named it; then killed. `detected` counts
    from the freeze, `recovered` from the kill.
    """
    master = engines.master
    pid = engines.pid(service)
    with FrontDoorWatch(master.url) as watch:
        run = freeze_then_kill(watch, pid, check, says)
    wait_for(lambda: engines.restarted(service, pid), timeout=60, what=f"{service} restarted")
    return run.figure(fault, watch)


def test_a_frozen_scraper_is_named_and_health_answers_at_once(engines):
    master = engines.master
    pid = engines.pid("scraper-1")
    os.kill(pid, signal.SIGSTOP)
    try:
        frozen = time.time()
        with FrontDoorWatch(master.url) as watch:
            detected = watch.wait("scrapers", False, frozen, "scraper 1/2")
        # 50 requests one after the other: each answers from the last check at once.
        took = []
        for _ in range(50):
            status, body, seconds = ask(f"{master.url}/health")
            took.append(seconds)
            assert status == 200 and b"scraper 1/2 at" in body, body[:300]
        p99 = sorted(took)[-1]  # the 99th percentile of 50 answers, nearest rank: the slowest
        assert p99 < ENGINE_WAIT, sorted(took)[-5:]  # none waited on the frozen scraper
        # The fleet page reads the same cached check: it never waits on the frozen engine.
        admin = master.admin()
        started = time.monotonic()
        fleet = admin.get("/")
        assert time.monotonic() - started < FLEET_PAGE_WITHIN
        assert "Metrics gap: scraper 1/2" in fleet
    finally:
        os.kill(pid, signal.SIGCONT)
    with FrontDoorWatch(master.url) as watch:
        thawed = time.time()
        back = watch.wait("scrapers", True, thawed)
    FIGURES.append(
        Figure("scraper-1 frozen (SIGSTOP)", detected.at - frozen, back.at - thawed, p99, 0.0,
               0, "recovered: from SIGCONT; its share is not scraped while frozen")
    )  # fmt: skip


def test_a_killed_store_is_named_restarted_and_nothing_scraped_meanwhile_is_lost(engines):
    figure = _kill(engines, "store", "metrics_store", "does not answer", "store killed (-9)")
    away = figure.at
    # Everything scraped from the moment it stopped answering waited on the scrapers'
    # disk and arrived.
    lost_after = engines.lost(away, away + figure.detected + figure.recovered + 4)
    # What it had accepted in memory before: VictoriaMetrics 1.79 keeps the last seconds
    # there, and has no flag to write them sooner; a kill loses them (reported).
    lost_before = engines.lost(away - 15, away)
    assert lost_after == 0
    figure.lost = lost_after
    figure.note = (
        f"recovered: from the kill; {lost_before} scrapes that it had accepted but held "
        "in memory were lost with it"
    )
    FIGURES.append(figure)


def test_a_frozen_store_is_named_and_its_backlog_arrives(engines):
    master = engines.master
    pid = engines.pid("store")
    with FrontDoorWatch(master.url) as watch:
        time.sleep(1)
        frozen = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            detected = watch.wait("metrics_store", False, frozen, "does not answer")
            time.sleep(10)  # an outage long enough to buffer a few scrapes
        finally:
            os.kill(pid, signal.SIGCONT)
        thawed = time.time()
        back = watch.wait("metrics_store", True, thawed)
        time.sleep(1)
    slowest = watch.kept_open(frozen, back.at)
    lost = engines.lost(frozen - 4, back.at + 4)
    assert lost == 0
    FIGURES.append(
        Figure("store frozen (SIGSTOP), 10 s", detected.at - frozen, back.at - thawed,
               slowest["health"], slowest["login"], lost, "recovered: from SIGCONT")
    )  # fmt: skip


def _fill(folder: Path, leave: int) -> Path:
    """A file that leaves `leave` bytes free on `folder`'s file system."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as handle:
        try:
            while shutil.disk_usage(folder).free > leave:
                handle.write(b"\0" * min(1 << 20, shutil.disk_usage(folder).free - leave))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def test_a_full_store_disk_is_named_and_its_backlog_arrives_once_freed(engines):
    if engines.store_disk is None:
        pytest.skip("a small disk for the store needs root (mount -t tmpfs)")
    master = engines.master
    with FrontDoorWatch(master.url) as watch:
        time.sleep(1)
        filled = time.time()
        filler = _fill(engines.store_disk, LEFT_FREE)
        try:
            detected = watch.wait("metrics_store", False, filled, "MAC_METRICS_MIN_FREE_BYTES")
            time.sleep(10)  # the store refuses samples below its own floor meanwhile
        finally:
            filler.unlink()
        freed = time.time()
        back = watch.wait("metrics_store", True, freed)
        time.sleep(1)
    slowest = watch.kept_open(filled, back.at)
    lost = engines.lost(filled - 4, back.at + 4)
    assert lost == 0
    FIGURES.append(
        Figure("store's disk full (4 MiB left)", detected.at - filled, back.at - freed,
               slowest["health"], slowest["login"], lost, "recovered: from freeing the space")
    )  # fmt: skip


def test_a_killed_scraper_is_named_and_restarted(engines):
    figure = _kill(engines, "scraper-1", "scrapers", "scraper 1/2", "scraper-1 killed (-9)")
    figure.note = "its share is not scraped until it is back: that gap is the fault itself"
    FIGURES.append(figure)


def test_a_killed_vmalert_is_named_and_restarted(engines):
    FIGURES.append(_kill(engines, "rules", "rules", "vmalert", "vmalert killed (-9)"))


def test_a_killed_targets_view_is_named_and_restarted(engines):
    fault = "targets view killed (-9)"
    FIGURES.append(_kill(engines, "prometheus", "targets_view", "targets view", fault))
    assert psutil.pid_exists(engines.pid("prometheus"))
