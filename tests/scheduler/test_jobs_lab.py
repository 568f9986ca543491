"""Job attribution against a real Slurm lab (with slurmdbd) and simulated H200 nodes of the
same host names: jobs on GPU indexes, jobs between two reads, the info series, and the
GPU alert that names the job on the faulty GPU.

One lab and one fleet for the module; each test reads Slurm with `read_jobs` as the
beat's task does, sweeps with `run_sweep()` and posts alerts to Debian's Alertmanager.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache

from alerting.nodealerts import post_node_alerts
from healthcheck.metrics import master_registry
from healthcheck.sweep import run_sweep
from inventory.models import Node
from macweb.dashboard.jobreport import build_report
from scheduler.jobread import LAST_READ_KEY, ReadResult, read_jobs, record
from scheduler.models import Job, JobGpu
from scheduler.slurm import SlurmClient
from testkit.dashboard_servers import PrometheusServer, Target, start_prometheus
from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.simfleet import Fault, FleetThread, loopback_base
from testkit.slurmlab import SlurmLab, SlurmLabUnavailable, ensure_users, lab_folder
from testkit.slurmlab.cli import top_up
from testkit.waiting import wait_for, wait_http
from tests.scheduler.conftest import macs_alertmanager, register_fleet_nodes

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ALICE, BOB = "maclab-alice", "maclab-bob"


@dataclass
class JobsLab:
    fleet: FleetThread
    lab: SlurmLab

    @property
    def client(self) -> SlurmClient:
        return SlurmClient(self.lab.conf)

    def host(self, index: int) -> str:
        return self.fleet.nodes[index].hostname

    def read(self) -> ReadResult:
        return read_jobs(self.client)


@pytest.fixture(scope="module")
def jobs_lab() -> Iterator[JobsLab]:
    """Two simulated 8x H200 nodes and a Slurm lab (with accounting) of the same names."""
    fleet = FleetThread(
        2, base=loopback_base(), profiles="nvidia=1", fault_rate=0, evidence_window=60
    ).start()
    try:
        ensure_users()
        with lab_folder() as root:
            names = [node.hostname for node in fleet.nodes]
            lab = SlurmLab.start(root, names, 8, accounting=True)
            try:
                yield JobsLab(fleet, lab)
            finally:
                lab.stop()
    except SlurmLabUnavailable as exc:
        pytest.skip(str(exc))
    finally:
        fleet.stop()


@pytest.fixture
def jobs(jobs_lab, settings, tmp_path, db) -> Iterator[JobsLab]:
    """The fleet registered and swept once, SLURM_CONF at the lab, no job running."""
    jobs_lab.lab.cancel_all()
    for sim in jobs_lab.fleet.nodes:
        jobs_lab.fleet.reboot(sim.ip)
    cache.delete(LAST_READ_KEY)
    settings.SLURM_CONF = jobs_lab.lab.conf
    settings.SLURM_NODE_MAP = ""
    settings.PROBE_TIMEOUT = 1.0
    settings.SD_DIR = tmp_path / "targets"
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"
    register_fleet_nodes(jobs_lab.fleet)
    run_sweep()
    wait_for(lambda: not jobs_lab.lab.squeue("-h", "-t", "running"), 30, 0.2, what="no job")
    yield jobs_lab
    jobs_lab.lab.cancel_all()


def held(job_id: int) -> dict[str, list[int]]:
    """NodeName -> GPU indexes the job holds now, as recorded."""
    rows = JobGpu.objects.filter(job__job_id=job_id, until__isnull=True).order_by("index")
    found: dict[str, list[int]] = {}
    for row in rows:
        found.setdefault(row.slurm_node, []).append(row.index)
    return found


def test_two_jobs_of_two_gpus_are_on_their_indexes_within_one_read_and_leave_at_the_end(jobs):
    host = jobs.host(0)
    first = jobs.lab.submit(gpus=2, node=host, user=ALICE, seconds=120, account="physics")
    second = jobs.lab.submit(gpus=2, node=host, user=BOB, seconds=120)
    for job in (first, second):
        jobs.lab.wait_job(job, "RUNNING")

    result = jobs.read()

    assert result.opened == 4 and result.accounting
    assert held(first) == {host: [0, 1]}
    assert held(second) == {host: [2, 3]}
    recorded = Job.objects.get(job_id=first)
    assert (recorded.user, recorded.account, recorded.state) == (ALICE, "physics", "RUNNING")
    node = Node.objects.get(hostname=host)
    assert set(JobGpu.objects.filter(job__job_id=first).values_list("node", flat=True)) == {node.pk}

    registry = master_registry()
    uuid = node.gpus.get(index=1).uuid
    labels = {"Hostname": host, "gpu": "1", "UUID": uuid, "job_id": str(first), "user": ALICE}
    assert registry.get_sample_value("mac_gpu_job_info", {**labels, "partition": "gpu"}) == 1
    series = [s for m in registry.collect() if m.name == "mac_gpu_job_info" for s in m.samples]
    assert len(series) == 4  # one per GPU in use, nothing per idle GPU

    jobs.lab.run("scancel", str(first))
    jobs.lab.wait_job(first, "CANCELLED")
    result = jobs.read()

    assert result.closed == 2
    assert held(first) == {} and held(second) == {host: [2, 3]}
    ended = JobGpu.objects.filter(job__job_id=first)
    assert all(row.until and row.until >= row.since for row in ended)
    assert Job.objects.get(job_id=first).state == "CANCELLED"


def test_a_short_job_between_two_reads_is_still_on_record(jobs):
    jobs.read()
    short = jobs.lab.submit(gpus=1, node=jobs.host(1), user=ALICE, seconds=5)
    jobs.lab.wait_job(short, "COMPLETED", timeout=30)

    jobs.read()

    recorded = Job.objects.get(job_id=short)
    assert (recorded.user, recorded.state, recorded.gpu_count) == (ALICE, "COMPLETED", 1)
    assert recorded.nodes == [jobs.host(1)]
    assert recorded.ended - recorded.started >= timedelta(seconds=4)


def test_a_job_slurmctld_forgot_is_recorded_from_accounting(jobs):
    started = datetime.now(UTC) - timedelta(seconds=2)
    short = jobs.lab.submit(gpus=2, node=jobs.host(1), user=BOB, seconds=0.5)
    jobs.lab.wait_job(short, "COMPLETED", timeout=30)
    # slurmdbd has the job's start before its end: until the end arrives, sacct says it
    # runs, and a record that only sacct says runs waits for the next read (merge).
    accounted = wait_for(
        lambda: [
            j for j in jobs.client.accounting_jobs(started) if j.job_id == short and j.finished
        ],
        10, 0.1, what=f"job {short} finished in sacct",
    )  # fmt: skip

    record([], accounted, datetime.now(UTC), ReadResult())  # squeue no longer lists it

    recorded = Job.objects.get(job_id=short)
    assert (recorded.user, recorded.state, recorded.gpu_count) == (BOB, "COMPLETED", 2)


def test_an_xid_on_gpu_1_names_the_job_that_held_it_in_the_alert(
    jobs, settings, tmp_path, client, django_user_model
):
    host = jobs.host(0)
    job_a = jobs.lab.submit(gpus=2, node=host, user=ALICE, seconds=120, name="train")
    jobs.lab.wait_job(job_a, "RUNNING")
    jobs.read()
    assert held(job_a) == {host: [0, 1]}

    with macs_alertmanager(settings, tmp_path) as server:
        time.sleep(0.5)  # the XID lands after the job took the GPU
        injected = datetime.now(UTC)
        jobs.fleet.inject(jobs.fleet.nodes[0].ip, Fault.XID, 1, 48)
        run_sweep()
        post_node_alerts()
        alerts = wait_for(
            lambda: [
                a for a in server.get("/api/v2/alerts")
                if a["labels"]["alertname"].startswith("MacGpu") and a["labels"]["gpu"] == "1"
            ],
            10, 0.2, what="the GPU alert in Alertmanager",
        )  # fmt: skip
    annotations = alerts[0]["annotations"]
    assert annotations["jobs"] == f"job {job_a} ({ALICE})"
    assert f"job {job_a} ({ALICE})" in annotations["summary"]

    report = build_report(Job.objects.get(job_id=job_a))
    (fault,) = [f for f in report.faults if f["gpu"] == 1]
    assert fault["hostname"] == host and fault["detail"].startswith("XID 48")
    # the XID's own time (the exporter's event), not the sweep's
    assert abs((fault["at"] - injected).total_seconds()) < 5
    clock = fault["at"].strftime("%H:%M")
    assert report.summary == f"GPU 1 of {host} had XID 48 at {clock}, while the job ran"
    assert [f["gpu"] for f in report.faults] == [1]  # the XID's GPU, no other
    # what Alice reads: the job's API and page say the same
    client.force_login(django_user_model.objects.create_user(ALICE, password="x"))
    body = client.get(f"/api/v1/jobs/{job_a}/").json()
    assert body["summary"] == report.summary
    assert [(f["hostname"], f["gpu"], f["detail"]) for f in body["faults"]] == [
        (f["hostname"], f["gpu"], f["detail"]) for f in report.faults
    ]
    assert report.summary in client.get(f"/jobs/{job_a}/").content.decode()


@pytest.fixture
def prometheus(jobs, tmp_path, settings) -> Iterator[PrometheusServer]:
    """Debian's Prometheus scraping both simulated nodes' dcgm-exporter every second,
    with the node label the targets file gives (MAC's node id)."""
    targets = []
    for sim in jobs.fleet.nodes:
        node = Node.objects.get(hostname=sim.hostname)
        port = sim.exporters()["dcgm-exporter"]
        targets.append(Target("dcgm-exporter", f"{sim.ip}:{port}", {"node": str(node.pk)}))
    server = start_prometheus(targets, tmp_path / "prometheus")
    settings.PROMETHEUS_URL = server.url
    try:
        server.wait_for("count(DCGM_FI_DEV_GPU_UTIL) >= 16")
        yield server
    finally:
        server.stop()


def test_the_job_page_charts_exactly_the_jobs_gpus_and_only_for_its_user(
    jobs, prometheus, client, django_user_model
):
    host = jobs.host(0)
    other = jobs.lab.submit(gpus=2, node=host, user=BOB, seconds=120)
    mine = jobs.lab.submit(gpus=2, node=host, user=ALICE, seconds=120)
    for job in (other, mine):
        jobs.lab.wait_job(job, "RUNNING")
    jobs.read()
    assert held(mine) == {host: [2, 3]}
    node = Node.objects.get(hostname=host)
    alice = django_user_model.objects.create_user(ALICE, password="x")
    bob = django_user_model.objects.create_user(BOB, password="x")

    client.force_login(alice)

    def charted() -> dict | None:
        # A scrape that failed on a loaded machine leaves a gap (a staleness marker) at
        # the job's first point: asked again until each line has a sample.
        answer = client.get(f"/api/v1/jobs/{mine}/")
        assert answer.status_code == 200, answer.content
        body = answer.json()
        lines = [s["values"] for chart in body["charts"] for s in chart["series"]]
        full = len(lines) == 8 and all(any(v is not None for v in s) for s in lines)
        return body if full else None

    body = wait_for(charted, 40, 1.0, what="samples of the job's GPUs")
    assert (body["user"], body["state"]) == (ALICE, "RUNNING")
    assert [(g["hostname"], g["index"]) for g in body["gpus"]] == [(host, 2), (host, 3)]
    for chart in body["charts"]:
        assert chart["chart"] in {"gpu_util", "gpu_memory", "gpu_power", "gpu_temp"}
        assert f'node=~"{node.pk}",gpu=~"2|3"' in chart["queries"][0]
        assert [s["label"] for s in chart["series"]] == [f"{host} GPU 2", f"{host} GPU 3"]
        assert all(any(v is not None for v in s["values"]) for s in chart["series"]), chart
    assert body["summary"].startswith("2 GPUs, mean utilisation ")
    assert body["summary"].endswith(" %, no hardware fault")

    page = client.get(f"/jobs/{mine}/")
    assert page.status_code == 200
    assert body["summary"] in page.content.decode()
    drawn = page.context["chart_data"]  # what job.js draws, rendered into the page
    assert [c["chart"] for c in drawn] == [c["chart"] for c in body["charts"]]
    assert all(len(c["series"]) == 2 for c in drawn)
    node_page = client.get(f"/nodes/{node.pk}/").content.decode()
    assert f'<a href="/jobs/{mine}/">job {mine}</a> {ALICE}' in node_page
    assert f'<a href="/jobs/{other}/">job {other}</a> {BOB}' in node_page

    assert client.get(f"/api/v1/jobs/{other}/").status_code == 404  # Bob's
    assert client.get(f"/jobs/{other}/").status_code == 404
    client.force_login(bob)
    assert client.get(f"/api/v1/jobs/{mine}/").status_code == 404
    assert client.get(f"/api/v1/jobs/{other}/").status_code == 200


def test_the_demo_keeps_its_jobs_running(jobs):
    submitted = top_up(jobs.lab, 3, random.Random(7))

    assert len(submitted) == 3
    assert top_up(jobs.lab, 3, random.Random(7)) == []  # three are there already
    users = jobs.lab.squeue("-h", "-o", "%u").split()
    assert len(users) == 3 and set(users) <= {ALICE, BOB}


@pytest.fixture
def sharded_store(jobs, tmp_path, settings) -> Iterator[str]:
    """Scale-out mode's engines (MAC_SCRAPE_SHARDS=2): one victoria-metrics store and two
    vmagent scrapers, each scraping one of the two nodes, as the shards split the fleet
    by node; the charts read the store (MAC_PROMETHEUS_URL), as `mac start master` sets."""
    if not (shutil.which("victoria-metrics") and shutil.which("vmagent")):
        pytest.skip("Debian's victoria-metrics package is needed")
    procs = []
    store = f"http://127.0.0.1:{free_port()}"
    try:
        procs.append(subprocess.Popen(
            ["victoria-metrics", f"-storageDataPath={tmp_path / 'store'}",
             f"-httpListenAddr={store.removeprefix('http://')}", "-search.latencyOffset=1s",
             "-loggerLevel=ERROR"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        wait_http(f"{store}/health", process=procs[0])
        for shard, sim in enumerate(jobs.fleet.nodes):
            node = Node.objects.get(hostname=sim.hostname)
            config = tmp_path / f"scraper-{shard}.yml"
            address = f"{sim.ip}:{sim.exporters()['dcgm-exporter']}"
            config.write_text(
                "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: dcgm-exporter\n"
                f"    static_configs: [{{targets: ['{address}'], labels: {{node: '{node.pk}'}}}}]\n"
            )
            url = f"http://127.0.0.1:{free_port()}"
            procs.append(subprocess.Popen(
                ["vmagent", f"-promscrape.config={config}",
                 f"-remoteWrite.url={store}/api/v1/write",
                 f"-remoteWrite.tmpDataPath={tmp_path / f'buffer-{shard}'}",
                 "-remoteWrite.flushInterval=1s", "-loggerLevel=ERROR",
                 f"-httpListenAddr={url.removeprefix('http://')}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
            wait_http(f"{url}/health", process=procs[-1])
        settings.SCRAPE_SHARDS = 2
        settings.PROMETHEUS_URL = store
        yield store
    finally:
        for proc in reversed(procs):
            stop_process(proc)


def test_under_two_shards_the_job_charts_hold_its_gpus_of_both_nodes(jobs, sharded_store):
    first, second = jobs.host(0), jobs.host(1)
    job = jobs.lab.run(
        "sbatch", "--parsable", "--nodes=2", "--gres=gpu:2", "--partition=gpu",
        "--output=/dev/null", "--chdir=/tmp", "--wrap", "exec /bin/sleep 120",
    ).strip()  # fmt: skip
    jobs.lab.wait_job(int(job), "RUNNING")
    jobs.read()
    recorded = Job.objects.get(job_id=int(job))

    def charted():
        report = build_report(recorded)
        lines = {s["label"] for c in report.charts for s in c["series"] if any(s["values"])}
        return report if len(lines) == 4 else None

    report = wait_for(charted, 40, 1.0, what="the job's GPUs of both shards in the store")
    for chart in report.charts:
        labels = [s["label"] for s in chart["series"]]
        assert labels == [f"{first} GPU 0", f"{first} GPU 1", f"{second} GPU 0", f"{second} GPU 1"]
