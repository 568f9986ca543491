"""Real Celery workers share sharded sweeps: the same results as one worker; a death loses nothing.

Beat, workers and the fleet are real processes; chunks go to a probe queue of the test's
own (MAC_PROBE_QUEUE) that the workers consume beside Celery's default queue, in a
Celery chord whose callback publishes the sweep.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from healthcheck.state import sweep_count, sweep_history
from inventory.choices import NodeStatus
from inventory.live import MESSAGE_TYPE, join_dashboard, leave_dashboard
from inventory.models import Node, NodeEvent
from testkit.simfleet import Mode
from testkit.waiting import wait_for

pytestmark = pytest.mark.slow

QUEUE = f"mac-probe-test-{os.getpid()}"
STATUS_FIELDS = ("hostname", "status", "status_reason", "status_detail", "diagnosis",
                 "exporter_health")  # fmt: skip


@pytest.fixture
def probe_queue(sweep_redis):
    def clear() -> None:
        for key in (QUEUE, f"_kombu.binding.{QUEUE}", "unacked", "unacked_index"):
            sweep_redis.delete(key)

    clear()
    yield QUEUE
    clear()


@pytest.fixture
def eight_nodes(fleet, make_node):
    """Two chunks' worth of each: answer, refuse, hang, forwarding-off."""
    runner = fleet(8)
    for index in (1, 5):
        runner.set_node_mode(index, Mode.REFUSE)
    for index in (2, 6):
        runner.set_node_mode(index, Mode.HANG)
    for index in (3, 7):
        runner.set_mode(index, "sys-exporter", Mode.BLACKHOLE)
    return runner, [make_node(ip=node.ip) for node in runner.nodes]


def snapshot(sd_dir: Path) -> dict:
    return {
        "statuses": list(Node.objects.order_by("id").values_list(*STATUS_FIELDS)),
        "events": sorted(
            (e.hostname, e.kind, e.message, json.dumps(e.data, sort_keys=True))
            for e in NodeEvent.objects.all()
        ),
        "targets": {path.name: path.read_text() for path in sorted(sd_dir.glob("*.json"))},
    }


def finished_sweep(client, chunks: int) -> dict | None:
    return next((s for s in sweep_history(client) if s["chunks"] == chunks), None)


class Dashboard:
    """Every push a dashboard page would get, collected on a thread while the test runs.

    The listener waits on receive() without a timeout (a receive cancelled by a timeout
    can drop the message it was taking) and stops on a message of the test's own.
    """

    STOP = "test.stop"

    def __init__(self) -> None:
        self.changed: list[int] = []
        self.messages = 0
        self._layer = get_channel_layer()
        self._channel = async_to_sync(self._layer.new_channel)()
        self._joined = threading.Event()
        self._thread = threading.Thread(target=async_to_sync(self._listen), daemon=True)

    async def _listen(self) -> None:
        await join_dashboard(self._layer, self._channel)
        self._joined.set()
        try:
            while True:
                message = await self._layer.receive(self._channel)
                if message["type"] == self.STOP:
                    return
                if message["type"] != MESSAGE_TYPE:
                    continue  # the alerts' pushes share the dashboard's group
                self.messages += 1
                self.changed.extend(change["id"] for change in message["changes"])
        finally:
            await leave_dashboard(self._layer, self._channel)

    def __enter__(self) -> Dashboard:
        self._thread.start()
        self._joined.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async_to_sync(self._layer.send)(self._channel, {"type": self.STOP})
        self._thread.join(10)


def test_two_workers_give_the_statuses_events_and_targets_of_one(
    master_procs, sweep_redis, probe_queue, eight_nodes, tmp_path
):
    # One worker, a chunk size above the fleet: the sweep runs in one task, as before.
    procs = master_procs(beats=1, MAC_SD_DIR=str(tmp_path / "one"), MAC_SWEEP_CHUNK_SIZE="100")
    try:
        wait_for(lambda: finished_sweep(sweep_redis, 1), timeout=40, interval=0.1)
    except AssertionError:
        pytest.fail("no sweep on one worker:\n" + procs.logs())
    procs.stop_all()
    expected = snapshot(tmp_path / "one")
    NodeEvent.objects.all().delete()
    Node.objects.update(
        status=NodeStatus.UNKNOWN, status_reason="", status_detail="", diagnosis="",
        exporter_health={}, last_seen=None,
    )  # fmt: skip
    for key in sweep_redis.scan_iter(match="*:sweep:*"):
        sweep_redis.delete(key)

    master_procs(
        beats=1, worker=False, MAC_SD_DIR=str(tmp_path / "two"),
        MAC_SWEEP_CHUNK_SIZE="2", MAC_PROBE_QUEUE=probe_queue,
    )  # fmt: skip
    master_procs.start_worker(name="master-worker", queues=f"celery,{probe_queue}")
    probe_worker = master_procs.start_worker(name="probe-worker", queues=probe_queue)
    try:
        sweep = wait_for(lambda: finished_sweep(sweep_redis, 4), timeout=40, interval=0.1)
    except AssertionError:
        pytest.fail("no sharded sweep:\n" + procs.logs())

    # The first sharded sweep alone makes every change; later ones find none to make.
    assert (sweep["nodes"], sweep["changed"]) == (8, 8), sweep
    assert snapshot(tmp_path / "two") == expected
    probe_log = probe_worker.log_path.read_text()
    assert "probe_chunk[" in probe_log and "probe_fleet[" not in probe_log
    master_log = (procs.log_dir / "master-worker.log").read_text()
    assert "finish_sweep[" in master_log
    # The chord's results and bookkeeping in Redis all expire (CELERY_RESULT_EXPIRES).
    results = [
        key
        for pattern in ("celery-task-meta-*", "chord-unlock-*")
        for key in sweep_redis.scan_iter(match=pattern)
    ]
    assert results, "the chunks' results went through Redis"
    assert all(0 < sweep_redis.ttl(key) <= 120 for key in results)


def _prober_of(workers: list[psutil.Process], ip: str) -> psutil.Process | None:
    """The worker process (a prefork child or a solo worker) with a connection to `ip`."""
    for worker in workers:
        for process in [worker, *worker.children(recursive=True)]:
            try:
                if any(c.raddr and c.raddr.ip == ip for c in process.net_connections("tcp")):
                    return process
            except psutil.NoSuchProcess:
                continue
    return None


class Freeze:
    """SIGSTOP every worker process the moment the hanging port receives its first probe.

    The chunk that probes the hanging node waits there for the probe timeout (2 s);
    looking for its worker by polling sockets could land after that window (the scans
    are slow on a busy host), when the chunk has already finished. Stopped on the
    request itself, the prober still holds its connection, so it can be found at leisure
    and killed mid-chunk, every time.
    """

    def __init__(self, workers: list[psutil.Process]) -> None:
        self.workers = workers
        self.stopped: list[psutil.Process] = []
        self.done = threading.Event()

    def __call__(self) -> None:
        if self.done.is_set():
            return
        for worker in self.workers:
            for process in [worker, *worker.children(recursive=True)]:
                process.send_signal(signal.SIGSTOP)
                self.stopped.append(process)
        self.done.set()

    def release(self) -> None:
        for process in self.stopped:
            try:
                process.send_signal(signal.SIGCONT)
            except psutil.NoSuchProcess:
                continue


INTERVAL, TIMEOUT = 15.0, 2.0  # a chunk hangs 2 s on its node; the visibility timeout is 5 s


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_chunk_whose_worker_is_killed_runs_again_within_one_interval(
    master_procs, sweep_redis, probe_queue, eight_nodes, pool
):
    """prefork: the pool's child dies and its parent gives the chunk back (at once, or
    by the visibility timeout when the parent learns of it late). solo: the whole
    worker dies, and the broker hands its unacknowledged chunk to the other worker
    after the visibility timeout (a third of the interval). Either way the
    chunk runs again in the same sweep, its nodes probed within one interval of the
    kill, and the sweep finishes with every chunk, each change written once."""
    runner, nodes = eight_nodes
    hung = runner.nodes[2].ports["sys-exporter"]  # its chunk waits the whole timeout on it
    procs = master_procs(
        beats=1, worker=False, interval=INTERVAL, timeout=TIMEOUT,
        MAC_SWEEP_CHUNK_SIZE="2", MAC_PROBE_QUEUE=probe_queue,
    )  # fmt: skip
    queues = f"celery,{probe_queue}"
    workers = [master_procs.start_worker(name=f"w{i}", pool=pool, queues=queues) for i in (1, 2)]
    with Dashboard() as dashboard:
        freeze = Freeze([psutil.Process(worker.pid) for worker in workers])
        hung.on_request = freeze
        try:
            if not freeze.done.wait(60):
                pytest.fail("no chunk probed the hanging node:\n" + procs.logs())
            victim = _prober_of(freeze.workers, runner.nodes[2].ip)
            assert victim is not None, "the stopped workers hold no probe of the hanging node"
            probed = hung.requests
            victim.send_signal(signal.SIGKILL)
        finally:
            hung.on_request = None
            freeze.release()
        assert not sweep_count(sweep_redis), "the first sweep finished before the kill"
        killed = time.monotonic()
        try:
            wait_for(lambda: hung.requests > probed, timeout=2 * INTERVAL, interval=0.02)
            again = time.monotonic() - killed
            wait_for(lambda: finished_sweep(sweep_redis, 4), timeout=40, interval=0.1)
            wait_for(lambda: set(dashboard.changed) >= {n.pk for n in nodes}, timeout=20)
        except AssertionError:
            pytest.fail("the chunk never ran again after the kill:\n" + procs.logs())

    assert again < INTERVAL, f"its nodes were probed again {again:.1f} s after the kill"
    expected = {
        node.pk: NodeStatus.OFFLINE if index % 4 else NodeStatus.ONLINE
        for index, node in enumerate(nodes)
    }
    assert dict(Node.objects.values_list("pk", "status")) == expected
    events = list(NodeEvent.objects.values_list("node_id", flat=True))
    assert sorted(events) == sorted(expected), "one event per node, none doubled"
    # The very sweep that lost the chunk finished, with all four chunks' changes.
    first = sweep_history(sweep_redis)[-1]
    assert (first["chunks"], first["changed"]) == (4, 8), first
    logs = "".join(path.read_text(errors="replace") for path in procs.log_dir.glob("w*.log"))
    received = re.findall(r"probe_chunk\[([0-9a-f-]+)\] received", logs)
    assert len(received) - len(set(received)) >= 1, "the same chunk task was run again"
