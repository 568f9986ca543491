"""The dashboard in real headless Chromium against a real uvicorn (behind nginx, as the
master serves it), Redis and Prometheus.

The server is `uvicorn macweb.asgi:application` in a subprocess connected to this
run's test database (so the tests are transactional: what they write is committed
and the server sees it). Fake agents are the simulated fleet's loopback servers;
the sweep is healthcheck.sweep.run_sweep, the same code the Celery task runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connection, connections

from inventory.choices import Diagnosis, GpuVendor, NodeStatus, StatusReason
from inventory.models import Node
from scraping.promconfig import render_prometheus_config
from testkit import dashboard_servers as servers
from testkit.browser import CHROMIUM, CHROMIUM_ARGS, log_in
from testkit.factories import online_gpu_node
from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.proxy import start_proxy

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]


def in_thread(fn: Callable, *args, **kwargs):
    """Run Django/sweep code off the Playwright thread (its event loop makes Django refuse
    synchronous database calls there), closing the thread's connection afterwards."""

    def call():
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result(timeout=60)


@dataclass
class Server:
    """uvicorn behind nginx, as the master serves the dashboard: `port` is the proxy's,
    so the live socket goes through nginx's WebSocket passthrough."""

    url: str
    port: int
    env: dict[str, str]
    root: Path  # the proxy's folder (nginx's configuration and logs): the test's own
    proc: object = None
    proxy: object = None

    def start(self) -> None:
        api_port = free_port()
        self.proc, _ = servers.start_uvicorn(self.env, port=api_port)
        full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "macweb.settings", **self.env}
        self.proxy = start_proxy(self.root, full_env, self.port, api_port)

    def stop(self) -> None:
        if self.proxy is not None:
            stop_process(self.proxy)
        stop_process(self.proc)


def server_env(chart_env, data_dir: Path) -> dict[str, str]:
    db = connection.settings_dict
    if connection.vendor != "postgresql":
        pytest.skip("the browser tests share the test database with uvicorn: needs PostgreSQL")
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    url = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    return {
        "DATABASE_URL": url,
        "MAC_TEST_DB_NAME": "",
        "MAC_PROMETHEUS_URL": chart_env.prometheus.url,
        "MAC_DATA_DIR": os.environ.get("MAC_DATA_DIR", str(data_dir)),
    }


@pytest.fixture(scope="session")
def asgi_server(django_db_setup, django_db_blocker, chart_env, tmp_path_factory) -> Iterator:
    env = server_env(chart_env, tmp_path_factory.mktemp("server-data"))
    port = free_port()
    server = Server(f"http://127.0.0.1:{port}", port, env, tmp_path_factory.mktemp("proxy"))
    server.start()
    yield server
    server.stop()  # before the test database is dropped


# Module scope: Playwright's loop must be gone before async tests elsewhere start theirs.
@pytest.fixture(scope="module")
def browser(django_db_setup):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread, and Django then refuses
    # the database work pytest-django does here between tests (flushing the tables).
    # Nothing runs on that loop while Django does, which is what this switch asserts.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


@pytest.fixture
def operator(django_user_model):
    return in_thread(django_user_model.objects.create_user, "operator", password="operator-pass")


@pytest.fixture
def fleet():
    from testkit.simfleet import FleetThread

    # Loopback addresses of our own, so parallel runs of other suites never collide.
    base = f"127.55.{os.getpid() % 250}.0"
    with FleetThread(2, base=base) as running:
        yield running


def online_fleet_node(fleet, index: int) -> int:
    """The inventory's Online node for the simulated fleet's node `index`; its id."""
    node = fleet.nodes[index]
    return in_thread(
        online_gpu_node,
        hostname=node.hostname,
        ip=node.ip,
        exporters=node.exporters(),
        gpu_vendor="none",
    ).pk


def sweep(sd_dir: Path) -> None:
    from healthcheck.sweep import run_sweep

    in_thread(run_sweep, sd_dir=sd_dir)


def test_the_fleet_page_follows_sweeps_live(page, asgi_server, operator, fleet, tmp_path):
    from playwright.sync_api import expect

    ids = [online_fleet_node(fleet, index) for index in range(len(fleet.nodes))]
    sweep(tmp_path)
    log_in(page, asgi_server.url)
    victim = page.locator(f'tr[data-node-id="{ids[0]}"]')
    expect(victim.locator(".status .badge")).to_have_text("Online")
    expect(page.locator(f'tr[data-node-id="{ids[1]}"] .status .badge')).to_have_text("Online")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    page.evaluate("window.__sameDocument = true")

    fleet.set_node_mode(0, "refuse")  # the agent was stopped
    sweep(tmp_path)
    # Pushed, not polled: the page reloads nothing, and the row changes within 3 s (how
    # fast is bench/dashboard.py's to measure).
    expect(victim.locator(".status .badge")).to_have_text("Offline", timeout=3000)
    expect(victim.locator(".reason")).to_contain_text("connection refused")
    expect(victim.locator(".diagnosis")).not_to_be_empty()
    expect(page.locator('[data-count="status.offline"]')).to_have_text("1")

    fleet.set_node_mode(0, "answer")  # started again
    sweep(tmp_path)
    expect(victim.locator(".status .badge")).to_have_text("Online", timeout=3000)
    expect(victim.locator(".reason")).to_have_count(0)
    expect(page.locator('[data-count="status.offline"]')).to_have_text("0")
    assert page.evaluate("window.__sameDocument") is True  # never reloaded


def test_a_deregistered_node_leaves_the_page_live(page, asgi_server, operator):
    from playwright.sync_api import expect

    from inventory.services import remove_node

    staying = in_thread(online_gpu_node, hostname="gpu-stays")
    leaving = in_thread(online_gpu_node, hostname="gpu-leaves")
    log_in(page, asgi_server.url)
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    expect(page.locator(f'tr[data-node-id="{leaving.pk}"]')).to_have_count(1)
    expect(page.locator('[data-count="total"]')).to_have_text("2")
    page.evaluate("window.__sameDocument = true")

    in_thread(remove_node, leaving, actor="agent", message="deregistered by the agent")

    expect(page.locator(f'tr[data-node-id="{leaving.pk}"]')).to_have_count(0, timeout=3000)
    expect(page.locator(f'tr[data-node-id="{staying.pk}"]')).to_have_count(1)
    expect(page.locator('[data-count="total"]')).to_have_text("1")
    assert page.evaluate("window.__sameDocument") is True


def test_a_drain_in_slurm_shows_live_on_the_fleet_and_node_pages(page, asgi_server, operator):
    from playwright.sync_api import expect

    from inventory.services.scheduling import save_slurm_view

    node = in_thread(online_gpu_node, hostname="gpu-drained")
    reason = "MAC: GPU 3 (UUID GPU-d) XID 79: GPU has fallen off the bus at 14:02:11; reboot"
    log_in(page, asgi_server.url)
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    row = page.locator(f'tr[data-node-id="{node.pk}"]')
    expect(row.locator(".badge-slurm-mac")).to_have_count(0)
    page.evaluate("window.__sameDocument = true")

    in_thread(save_slurm_view, {node.pk: ("draining", "mac", reason)})  # what a pass writes
    badge = row.locator(".badge-slurm-mac")
    expect(badge).to_have_text("drained by MAC", timeout=3000)
    expect(badge).to_have_attribute("title", f"draining: {reason}")
    assert page.evaluate("window.__sameDocument") is True

    page.goto(f"{asgi_server.url}/nodes/{node.pk}/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    expect(page.locator("#node-slurm-badge")).to_have_text("drained by MAC")
    in_thread(save_slurm_view, {node.pk: ("idle", "", "")})  # resumed
    expect(page.locator("#node-slurm-badge")).to_be_hidden(timeout=3000)
    in_thread(save_slurm_view, {node.pk: ("drained", "admin", "PSU swap")})
    expect(page.locator("#node-slurm-badge")).to_have_text("drained by admin", timeout=3000)
    expect(page.locator("#node-slurm-badge")).to_have_attribute("title", "drained: PSU swap")


def test_the_page_reconnects_after_a_restart_and_shows_what_it_missed(
    page, chart_env, operator, tmp_path
):
    from playwright.sync_api import expect

    port = free_port()
    server = Server(
        f"http://127.0.0.1:{port}", port, server_env(chart_env, tmp_path), tmp_path / "proxy"
    )
    server.start()
    try:
        node = in_thread(online_gpu_node, hostname="gpu-restart")
        log_in(page, server.url)
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        page.evaluate("window.__sameDocument = true")
        server.stop()
        expect(page.locator("#live")).to_have_attribute("data-state", "down")
        expect(page.locator("#live .live-text")).to_contain_text("reconnecting")
        in_thread(Node.objects.filter(pk=node.pk).update, status=NodeStatus.OFFLINE)
        server.start()
        expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=20_000)
        row = page.locator(f'tr[data-node-id="{node.pk}"]')
        expect(row.locator(".status .badge")).to_have_text("Offline")
        assert page.evaluate("window.__sameDocument") is True
    finally:
        server.stop()


def test_the_node_page_draws_charts_from_prometheus(page, asgi_server, chart_env, operator):
    from playwright.sync_api import expect

    in_thread(
        online_gpu_node,
        id=chart_env.nvidia_id,
        hostname=chart_env.nvidia_host,
        gpu_vendor=GpuVendor.NVIDIA,
        gpu_count=4,
    )
    log_in(page, asgi_server.url)
    page.goto(f"{asgi_server.url}/nodes/{chart_env.nvidia_id}/")
    for name, lines in [("cpu", 1), ("memory", 1), ("gpu_util", 4), ("gpu_power", 4), ("rdma", 4)]:
        figure = page.locator(f'figure[data-chart="{name}"]')
        expect(figure.locator("canvas")).to_have_count(1)
        # uPlot's legend: one row for time plus one per series drawn
        expect(figure.locator(".u-legend .u-series")).to_have_count(lines + 1)
        expect(figure.locator(".chart-empty")).to_be_hidden()
    page.click('button[data-range="24h"]')
    expect(page.locator('button[data-range="24h"]')).to_have_attribute("aria-pressed", "true")
    expect(page.locator('figure[data-chart="gpu_temp"] canvas')).to_have_count(1)


def running_job(node_id: int, user: str, indexes: tuple[int, ...], seconds: float) -> int:
    """A Slurm job as job attribution records it, holding `indexes` of the node."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import Job, JobGpu

    started = timezone.now() - timedelta(seconds=seconds)
    job = Job.objects.create(
        job_id=777001, user=user, partition="gpu", state="RUNNING", started=started,
        gpu_count=len(indexes), nodes=["chart-nv"],
    )  # fmt: skip
    for index in indexes:
        JobGpu.objects.create(
            job=job, node_id=node_id, slurm_node="chart-nv", index=index, since=started
        )
    return job.job_id


def test_the_job_page_draws_the_charts_of_its_gpus(page, asgi_server, chart_env, operator):
    from playwright.sync_api import expect

    in_thread(
        online_gpu_node, id=chart_env.nvidia_id, hostname=chart_env.nvidia_host,
        gpu_vendor=GpuVendor.NVIDIA, gpu_count=4,
    )  # fmt: skip
    job = in_thread(running_job, chart_env.nvidia_id, "operator", (1, 2), 60)
    log_in(page, asgi_server.url)
    page.goto(f"{asgi_server.url}/jobs/{job}/")
    expect(page.locator("#job-summary")).to_contain_text("2 GPUs, mean utilisation")
    for name in ("gpu_util", "gpu_memory", "gpu_power", "gpu_temp"):
        figure = page.locator(f'figure[data-chart="{name}"]')
        expect(figure.locator("canvas")).to_have_count(1)
        expect(figure.locator(".u-legend .u-series")).to_have_count(3)  # time + GPU 1, 2
    legend = page.locator('figure[data-chart="gpu_util"] .u-legend')
    expect(legend).to_contain_text(f"{chart_env.nvidia_host} GPU 1")
    expect(legend).to_contain_text(f"{chart_env.nvidia_host} GPU 2")
    from inventory.models import GpuHealth

    in_thread(GpuHealth.objects.bulk_create, [GpuHealth(node_id=chart_env.nvidia_id, index=1)])
    page.goto(f"{asgi_server.url}/nodes/{chart_env.nvidia_id}/")
    expect(page.locator('tr[data-gpu="1"] .gpu-job')).to_contain_text(f"job {job} operator")
    page.click('tr[data-gpu="1"] .gpu-job a')
    expect(page).to_have_url(f"{asgi_server.url}/jobs/{job}/")


def _gpu_verdict(node_id: int, index: int, words: str) -> None:
    """What a sweep writes for a GPU gone unhealthy, and its push of the node."""
    from contract.verdicts import Evidence, HealthAction, HealthState
    from inventory.models import GpuHealth

    lost = Evidence(
        "xid", "79", words, HealthState.UNHEALTHY, HealthAction.REBOOT, time.time(),
        str(index), f"GPU-{index}", "",
    )  # fmt: skip
    GpuHealth.objects.filter(node_id=node_id, index=index).update(
        state="unhealthy", action="reboot", evidence=[lost.as_dict()]
    )
    Node.objects.filter(pk=node_id).update(health_state="unhealthy", health_action="reboot")
    _push(node_id)


def _push(node_id: int) -> None:
    """The sweep's push of the node, as it is now."""
    from inventory.live import broadcast_node_changes

    broadcast_node_changes([Node.objects.get(pk=node_id).summary()])


def test_the_node_pages_gpu_rows_follow_verdicts_and_jobs_in_place(page, asgi_server, operator):
    from playwright.sync_api import expect

    from inventory.models import GpuHealth

    node = in_thread(online_gpu_node, hostname="gpu-rows", gpu_vendor=GpuVendor.NVIDIA, gpu_count=2)
    page.clock.install()  # the 30 s reread of the jobs, fast-forwarded below
    log_in(page, asgi_server.url)
    page.goto(f"{asgi_server.url}/nodes/{node.pk}/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    expect(page.locator("#gpu-table")).to_be_hidden()  # no verdict read yet
    page.evaluate("window.__sameDocument = true")

    # The first verdict: its rows, and the table, come with the node's push.
    gpus = [GpuHealth(node=node, index=i, uuid=f"GPU-{i}") for i in (0, 1)]
    in_thread(GpuHealth.objects.bulk_create, gpus)
    in_thread(_push, node.pk)
    expect(page.locator("#gpu-table")).to_be_visible(timeout=3000)
    expect(page.locator('tr[data-gpu="1"]')).to_have_class("gpu-healthy")
    expect(page.locator("#node-health-evidence")).to_have_text(
        "Every GPU answers healthy: no XID, ECC, remap, NVLink or slowdown evidence."
    )

    in_thread(_gpu_verdict, node.pk, 1, "XID 79: GPU has fallen off the bus")

    row = page.locator('tr[data-gpu="1"]')
    expect(row).to_have_class("gpu-unhealthy", timeout=3000)
    expect(row.locator(".evidence")).to_contain_text("XID 79: GPU has fallen off the bus")
    expect(page.locator('tr[data-gpu="0"]')).to_have_class("gpu-healthy")

    # A job starts on GPU 0: Slurm's jobs push nothing; the page rereads within 30 s.
    job = in_thread(running_job, node.pk, "alice", (0,), 5)
    expect(page.locator('tr[data-gpu="0"] .gpu-job')).to_have_text("-")
    page.clock.fast_forward(31_000)
    expect(page.locator('tr[data-gpu="0"] .gpu-job')).to_contain_text(f"job {job} alice")
    assert page.evaluate("window.__sameDocument") is True


def test_the_node_pages_verdict_diagnosis_and_their_fixes_follow_pushes(
    page, asgi_server, operator
):
    """What the page rendered is not left behind: a cleared verdict says so and loses its
    fix, and the diagnosis's fix block comes and goes with the diagnosis."""
    from playwright.sync_api import expect

    from inventory.models import GpuHealth

    node = in_thread(
        online_gpu_node, hostname="gpu-fixes", gpu_vendor=GpuVendor.NVIDIA, gpu_count=1
    )
    in_thread(GpuHealth.objects.create, node=node, index=0, uuid="GPU-0")
    log_in(page, asgi_server.url)
    page.goto(f"{asgi_server.url}/nodes/{node.pk}/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    expect(page.locator("#node-health-fix-box")).to_be_hidden()
    expect(page.locator("#node-diagnosis-fix-box")).to_be_hidden()
    page.evaluate("window.__sameDocument = true")

    in_thread(_gpu_verdict, node.pk, 0, "XID 79: GPU has fallen off the bus")
    in_thread(
        Node.objects.filter(pk=node.pk).update,
        health_evidence="GPU 0 XID 79: GPU has fallen off the bus; reboot",
        status=NodeStatus.OFFLINE, diagnosis="ip_forward_off",
    )  # fmt: skip
    in_thread(_push, node.pk)
    expect(page.locator("#node-health-fix-box")).to_be_visible(timeout=3000)
    expect(page.locator("#node-health-fix")).to_contain_text("reboot")
    expect(page.locator("#node-diagnosis-fix")).to_contain_text("net.ipv4.ip_forward=1")

    # A reset: the box names the GPU (the push carries the fix), never `<gpu>`.
    uuid = "GPU-5d2f7b1e-8c3a-4f6e-9b0d-2a7c1e4f8b93"
    in_thread(GpuHealth.objects.filter(node=node).update, uuid=uuid, action="reset_gpu")
    in_thread(Node.objects.filter(pk=node.pk).update, health_action="reset_gpu")
    in_thread(_push, node.pk)
    fix = page.locator("#node-health-fix")
    expect(fix).to_contain_text(f"sudo mac gpu reset {uuid}", timeout=3000)
    expect(fix).not_to_contain_text("<gpu>")

    in_thread(
        Node.objects.filter(pk=node.pk).update,
        health_state="healthy", health_action="none", health_evidence="",
        status=NodeStatus.ONLINE, diagnosis="",
    )  # fmt: skip
    in_thread(_push, node.pk)
    expect(page.locator("#node-health-evidence")).to_have_text(
        "Every GPU answers healthy: no XID, ECC, remap, NVLink or slowdown evidence.",
        timeout=3000,
    )
    expect(page.locator("#node-health-fix-box")).to_be_hidden()
    expect(page.locator("#node-diagnosis-fix-box")).to_be_hidden()
    expect(page.locator("#node-diagnosis")).to_have_text(
        "Nothing to diagnose: the sys-exporter answered the last probe."
    )
    assert page.evaluate("window.__sameDocument") is True


def test_the_node_page_shows_what_it_missed_while_the_master_restarted(
    page, chart_env, operator, tmp_path
):
    from playwright.sync_api import expect

    port = free_port()
    server = Server(
        f"http://127.0.0.1:{port}", port, server_env(chart_env, tmp_path), tmp_path / "proxy"
    )
    server.start()
    try:
        node = in_thread(online_gpu_node, hostname="gpu-node-restart")
        log_in(page, server.url)
        page.goto(f"{server.url}/nodes/{node.pk}/")
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        expect(page.locator("#node-status")).to_have_text("Online")
        page.evaluate("window.__sameDocument = true")
        server.stop()
        expect(page.locator("#live")).to_have_attribute("data-state", "down")
        in_thread(Node.objects.filter(pk=node.pk).update, status=NodeStatus.OFFLINE)
        server.start()
        expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=20_000)
        expect(page.locator("#node-status")).to_have_text("Offline", timeout=5000)
        assert page.evaluate("window.__sameDocument") is True
    finally:
        server.stop()


def test_an_empty_chart_says_why_in_the_page(page, asgi_server, operator):
    from playwright.sync_api import expect

    node = in_thread(online_gpu_node, hostname="gpu-nodata")
    log_in(page, asgi_server.url)
    page.goto(f"{asgi_server.url}/nodes/{node.pk}/")
    empty = page.locator('figure[data-chart="cpu"] .chart-empty')
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("No data yet")


def test_the_websocket_refuses_anonymous_browsers(page, asgi_server):
    page.goto(f"{asgi_server.url}/accounts/login/")
    outcome = page.evaluate(
        """() => new Promise((resolve) => {
            const ws = new WebSocket(`ws://${location.host}/ws/fleet/`);
            ws.onopen = () => resolve("open");
            ws.onclose = (event) => resolve(`closed ${event.code}`);
        })"""
    )
    assert outcome.startswith("closed"), outcome


def test_hostnames_are_text_not_markup(page, asgi_server, operator, tmp_path):
    from playwright.sync_api import expect

    node = in_thread(
        online_gpu_node,
        hostname="evil",
        status=NodeStatus.OFFLINE,
        status_detail='<img src=x onerror="window.__pwned=1">',
    )
    log_in(page, asgi_server.url)
    row = page.locator(f'tr[data-node-id="{node.pk}"]')
    expect(row.locator(".reason")).to_contain_text("<img src=x")
    from inventory.live import broadcast_node_changes

    in_thread(broadcast_node_changes, [in_thread(Node.objects.get, pk=node.pk).summary()])
    page.wait_for_timeout(500)
    expect(row.locator(".reason")).to_contain_text("<img src=x")
    assert page.evaluate("window.__pwned") is None


def test_a_page_whose_session_ended_says_logged_out(page, chart_env, operator, tmp_path):
    from django.contrib.sessions.models import Session
    from playwright.sync_api import expect

    port = free_port()
    server = Server(
        f"http://127.0.0.1:{port}", port, server_env(chart_env, tmp_path), tmp_path / "proxy"
    )
    server.start()
    try:
        log_in(page, server.url)
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        server.stop()
        in_thread(lambda: Session.objects.all().delete())  # e.g. an admin ended the sessions
        server.start()
        expect(page.locator("#live .live-text")).to_have_text(
            "logged out: reload to log in", timeout=20_000
        )
    finally:
        server.stop()


def forwarding_off(fleet, index: int, tmp_path: Path) -> None:
    """sys-exporter of the fleet's node `index` black-holed, as behind a bridge with
    IPv4 forwarding off, and a sweep that sees it."""
    fleet.set_mode(index, "sys-exporter", "blackhole")
    sweep(tmp_path)


def test_the_ip_forward_case_shows_its_diagnosis_and_fix(
    page, asgi_server, operator, fleet, tmp_path, settings
):
    """The guide's selective failure: nic-exporter (host network) answers, sys-exporter
    behind the bridge times out; the row says IPv4 forwarding is off, with the fix."""
    from playwright.sync_api import expect

    settings.PROBE_TIMEOUT = 0.5
    pk = online_fleet_node(fleet, 1)
    sweep(tmp_path)
    log_in(page, asgi_server.url)
    row = page.locator(f'tr[data-node-id="{pk}"]')
    expect(row.locator(".status .badge")).to_have_text("Online")
    forwarding_off(fleet, 1, tmp_path)
    expect(row.locator(".status .badge")).to_have_text("Offline", timeout=3000)
    expect(row.locator(".reason")).to_contain_text("timed out")
    expect(row.locator(".diagnosis-label")).to_contain_text("IPv4 forwarding is off")
    expect(row.locator(".diagnosis")).to_be_hidden()  # one line; the paragraph on a click
    row.locator("details.why-more > summary").click()
    expect(row.locator(".diagnosis")).to_contain_text("ip_forward")
    row.locator("details.fix summary").click()
    expect(row.locator("details.fix pre")).to_contain_text("sudo sysctl -w net.ipv4.ip_forward=1")


def test_an_opened_diagnosis_stays_open_while_pushes_and_resyncs_redraw_its_row(
    page, asgi_server, operator
):
    """An operator reading the fix must not see it snap shut: a push redraws the row at
    once and the resync after it redraws the whole table, and both keep it open."""
    from playwright.sync_api import expect

    from inventory.live import broadcast_node_changes

    node = in_thread(
        online_gpu_node, hostname="gpu-reading", status=NodeStatus.OFFLINE,
        status_reason=StatusReason.TIMEOUT, status_detail="no answer within 3.0 s",
        diagnosis=Diagnosis.IP_FORWARD_OFF,
    )  # fmt: skip
    log_in(page, asgi_server.url)
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    row = page.locator(f'tr[data-node-id="{node.pk}"]')
    row.locator("details.why-more > summary").click()
    row.locator("details.fix > summary").click()
    expect(row.locator("details.fix pre")).to_be_visible()
    # Each redraw of the row, with the reason it showed: the push's words, then the
    # resync's (the database's).
    page.evaluate(
        """(id) => {
          window.__redraws = [];
          new MutationObserver((records) => {
            for (const record of records) {
              for (const added of record.addedNodes) {
                if (added.dataset && added.dataset.nodeId === String(id)) {
                  window.__redraws.push(added.querySelector(".reason").textContent);
                }
              }
            }
          }).observe(document.getElementById("node-rows"), { childList: true });
        }""",
        node.pk,
    )
    pushed = {**in_thread(Node.objects.get, pk=node.pk).summary(), "status_detail": "pushed"}
    in_thread(broadcast_node_changes, [pushed])
    page.wait_for_function(
        """() => {
          const seen = window.__redraws.findIndex((reason) => reason.includes("pushed"));
          return seen >= 0 && window.__redraws.slice(seen + 1).some((r) => !r.includes("pushed"));
        }"""
    )
    expect(row.locator(".reason")).to_contain_text("no answer within 3.0 s")
    expect(row.locator(".diagnosis")).to_be_visible()
    expect(row.locator("details.fix pre")).to_contain_text("sudo sysctl -w net.ipv4.ip_forward=1")


def test_the_node_page_follows_which_exporters_prometheus_scrapes(
    page, asgi_server, operator, fleet, tmp_path, settings
):
    """Forwarding off while the node page is open: sys-exporter turns down and missing
    from Prometheus, nic-exporter stays up and scraped, without a reload."""
    from playwright.sync_api import expect

    settings.PROBE_TIMEOUT = 0.5
    sys_row = page.locator('tr[data-service="sys-exporter"]')
    nic_row = page.locator('tr[data-service="nic-exporter"]')
    pk = online_fleet_node(fleet, 0)
    sweep(tmp_path)
    log_in(page, asgi_server.url)
    page.goto(f"{asgi_server.url}/nodes/{pk}/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    expect(sys_row.locator(".exp-target")).to_have_text("scraped")
    forwarding_off(fleet, 0, tmp_path)
    expect(page.locator("#node-status")).to_have_text("Offline", timeout=3000)
    expect(sys_row.locator(".exp-probe")).to_have_text("down")
    expect(sys_row.locator(".exp-target")).to_have_text("missing")
    expect(nic_row.locator(".exp-probe")).to_have_text("up")
    expect(nic_row.locator(".exp-target")).to_have_text("scraped")


# A simulated fleet with hardware profiles: what a new user sees with
# MAC_SIMULATED_FLEET (vendor counts, the GPU model, GPU and RDMA charts with data).
GPU_CHARTS = ("gpu_util", "gpu_memory", "gpu_temp", "gpu_power", "gpu_errors")
MODELS = {"nvidia": "NVIDIA H200", "amd": "AMD Instinct MI300X"}


@pytest.fixture
def simulated():
    base = f"127.56.{os.getpid() % 250}.0"
    from testkit.simfleet import FleetThread

    with FleetThread(
        4, base=base, profiles="nvidia=1,amd=1,mangoboost=1,cpu=1", seed=3, fault_rate=0
    ) as fleet:
        yield fleet


# The header cell lies within its card (not clipped by the card's edge).
INSIDE_ITS_CARD = """(cell) => {
  const card = cell.closest(".card").getBoundingClientRect();
  const box = cell.getBoundingClientRect();
  return box.left >= card.left && box.right <= card.right;
}"""
# Drawn pixels in the canvas's first two columns: a y-axis label too wide for its axis.
INK_AT_LEFT_EDGE = """(canvas) => {
  const pixels = canvas.getContext("2d").getImageData(0, 0, 2, canvas.height).data;
  let inked = 0;
  for (let alpha = 3; alpha < pixels.length; alpha += 4) inked += pixels[alpha] > 0;
  return inked;
}"""


@pytest.mark.prometheus
def test_nvidia_and_amd_node_pages_draw_gpu_charts_of_a_simulated_fleet(
    page, simulated, chart_env, operator, tmp_path
):
    from playwright.sync_api import expect

    ids = {}
    for node in simulated.nodes:
        profile = node.hardware.profile
        ids[profile.name] = in_thread(
            online_gpu_node,
            hostname=node.hostname,
            ip=node.ip,
            exporters=node.exporters(),
            **node.registration(),
        ).pk
    sd_dir = tmp_path / "targets"
    sweep(sd_dir)
    config = render_prometheus_config(
        str(sd_dir), [], scrape_interval="1s", scrape_timeout="1s", sd_refresh_interval="1s"
    )
    prometheus = servers.start_prometheus_config(config, tmp_path / "prometheus")
    port = free_port()
    env = {**server_env(chart_env, tmp_path / "data"), "MAC_PROMETHEUS_URL": prometheus.url}
    server = Server(f"http://127.0.0.1:{port}", port, env, tmp_path / "proxy")
    server.start()
    try:
        for vendor, metric in (("nvidia", "DCGM_FI_DEV_GPU_UTIL"), ("amd", "gpu_gfx_activity")):
            prometheus.wait_for(f'{metric}{{node="{ids[vendor]}"}}')
            prometheus.wait_for(f'rate(rdma_rx_bytes_total{{node="{ids[vendor]}"}}[5s]) > 0')
        page.set_viewport_size({"width": 1500, "height": 900})  # where Chromium cut them
        log_in(page, server.url)
        expect(page.locator('[data-count="vendor.nvidia"]')).to_have_text("1")
        expect(page.locator('[data-count="vendor.amd"]')).to_have_text("2")
        expect(page.locator('[data-count="vendor.none"]')).to_have_text("1")
        for vendor in ("nvidia", "amd"):
            page.goto(f"{server.url}/nodes/{ids[vendor]}/")
            expect(page.locator("#node-gpus")).to_have_text(f"8 \u00d7 {MODELS[vendor]}")
            for name in GPU_CHARTS:
                figure = page.locator(f'figure[data-chart="{name}"]')
                expect(figure.locator("canvas")).to_have_count(1)
                # uPlot's legend: one row for time plus one per GPU drawn
                expect(figure.locator(".u-legend .u-series")).to_have_count(9)
                expect(figure.locator(".chart-empty")).to_be_hidden()
            rdma = page.locator('figure[data-chart="rdma"]')
            expect(rdma.locator(".u-legend .u-series")).to_have_count(17)  # 8 NICs, rx and tx
            # Prometheus' own word on each target, filled in once the page is drawn.
            scrape = page.locator('tr[data-service="sys-exporter"] .exp-scrape .badge')
            expect(scrape).to_have_text("up")
            expect(page.locator("#scrape-error")).to_be_hidden()
            # At 1500 px the Exporters card shows its last column (Scrape) whole, and the
            # GPU memory axis's labels ("828Gi") are not cut at the chart's left edge.
            assert page.locator("th", has_text="Scrape").evaluate(INSIDE_ITS_CARD), vendor
            memory = page.locator('figure[data-chart="gpu_memory"] canvas')
            assert memory.evaluate(INK_AT_LEFT_EDGE) == 0, vendor
    finally:
        server.stop()
        prometheus.stop()
