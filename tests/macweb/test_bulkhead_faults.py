"""One service at a time frozen (SIGSTOP) under the master: its paths fail fast, the
front door stays open (issue 26).

Each test runs the real serving stack (nginx, gunicorn + uvicorn, 2 workers of
MAC_API_THREADS=8, as `mac start master` runs it) against real services of its own on
free ports (Prometheus, Alertmanager, Redis, a tmpfs folder), freezes one of them,
and sends the burst that once took the master's request threads: 64 chart requests,
64 alerts.json. Meanwhile /health and POST /api/v1/register are timed.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from contract.settings import CATALOG
from healthcheck.health import OUTSIDE_DEADLINE, OUTSIDE_REUSE
from macweb.dashboard.scrapes import TIMEOUT as SCRAPES_TIMEOUT
from testkit.alerting import AlertmanagerServer
from testkit.dashboard_servers import start_prometheus_config
from testkit.frontdoor import Burst, Stack, Stopped, call, sample_front_door, start_stack
from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.waiting import wait_for
from tests.healthcheck.private_servers import PrivateRedis

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus is missing"),
    pytest.mark.skipif(
        not shutil.which("prometheus-alertmanager"), reason="Debian's alertmanager is missing"
    ),
    pytest.mark.skipif(not shutil.which("nginx"), reason="Debian's nginx is missing"),
]

BURST = 64
# The deadlines the burst's requests wait for (the settings' defaults, which the stacks
# keep): a front-door request that queued behind the burst would wait for them too, so
# one answered before its deadline never did. How fast it answers is bench/bulkheads.py's
# to measure, not a test's bound.
CHART_DEADLINE = CATALOG["MAC_DASHBOARD_PROMETHEUS_TIMEOUT"].default
ALERTS_DEADLINE = CATALOG["MAC_ALERTMANAGER_TIMEOUT"].default
# The shortest wait on Prometheus a page has: a node page that asked it would wait this.
SCRAPES_DEADLINE = min(SCRAPES_TIMEOUT, CHART_DEADLINE)
SWITCH_BOUND = 5.0  # the maintenance switch with Redis frozen
SLACK = 2.0  # a loaded 2-core CI machine, on the deadlines the master itself keeps


def _empty_prometheus(tmp_path: Path):
    config = {"global": {"scrape_interval": "15s"}, "scrape_configs": []}
    return start_prometheus_config(config, tmp_path / "prometheus")


def _alertmanager(tmp_path: Path) -> AlertmanagerServer:
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        yaml.safe_dump({"route": {"receiver": "nobody"}, "receivers": [{"name": "nobody"}]})
    )
    return AlertmanagerServer(config, tmp_path / "am-data").start()


def _node(stack: Stack) -> int:
    answer = call(
        f"{stack.url}/api/v1/register",
        {"hostname": "gpu-frozen-01", "exporters": {"sys-exporter": 29101}},
    )
    assert answer.status in (200, 201), answer
    return answer.body["id"]


def _front_door_kept_open(door: dict, deadline: float) -> None:
    """Every /health and registration answered, and before the burst's `deadline`: none
    waited behind the burst."""
    for name, answers in door.items():
        statuses = {a.status for a in answers}
        assert statuses <= {200, 201}, (name, statuses, [a.body for a in answers][:3])
        took = [a.seconds for a in answers]
        assert len(took) >= 10, name
        assert max(took) < deadline, (name, sorted(took)[-5:])


def _health_naming(url: str, check: str) -> dict:
    """/health once it names `check` as degraded, or its last answer after the time the
    master promises (healthcheck.health._LastAnswer: the reuse plus the deadline). Each
    API worker keeps its own last answer and refreshes it when a request finds it stale,
    so one request may meet a worker whose refresh this request itself starts."""
    deadline = time.monotonic() + OUTSIDE_REUSE + OUTSIDE_DEADLINE + SLACK
    while True:
        body = call(f"{url}/health").body
        if check in body.get("degraded", []) or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def test_prometheus_frozen_charts_fail_fast_and_the_front_door_stays_open(tmp_path):
    prometheus = _empty_prometheus(tmp_path)
    stack = start_stack(tmp_path / "master", {"MAC_PROMETHEUS_URL": prometheus.url})
    try:
        node = _node(stack)
        chart = f"{stack.url}/nodes/{node}/charts/cpu.json"
        cookie = {"Cookie": stack.session()}
        with Stopped(prometheus.proc.pid):
            with Burst(chart, BURST, cookie) as burst:
                time.sleep(0.3)  # all of them sent
                door = sample_front_door(stack.url, CHART_DEADLINE + 1, prefix="prom")
            health = _health_naming(stack.url, "prometheus")
            # The node page never asks Prometheus; its scrape health does, within 2 s.
            page = call(f"{stack.url}/nodes/{node}/", headers=cookie)
            scrapes = call(f"{stack.url}/nodes/{node}/scrapes.json", headers=cookie)
    finally:
        stack.stop()
        prometheus.stop()

    for answer in burst.answers:
        assert answer.status == 503, answer
        assert answer.body["empty_reason"], answer
        assert answer.seconds < CHART_DEADLINE + SLACK, answer
    reasons = {a.body["empty_reason"].split(" (")[0] for a in burst.answers}
    assert any("already wait on Prometheus" in r for r in reasons), reasons
    _front_door_kept_open(door, CHART_DEADLINE)
    assert "prometheus" in health["degraded"], health
    assert "did not answer within" in health["checks"]["prometheus"]["detail"]
    assert page.status == 200 and page.seconds < SCRAPES_DEADLINE, page  # never asked it
    assert scrapes.status == 503 and scrapes.seconds < SCRAPES_DEADLINE + SLACK, scrapes
    assert f"did not answer within {SCRAPES_DEADLINE:g} s" in scrapes.body["error"], scrapes


def test_alertmanager_frozen_alerts_fail_fast_and_the_front_door_stays_open(tmp_path):
    alertmanager = _alertmanager(tmp_path)
    stack = start_stack(
        tmp_path / "master",
        {"MAC_ALERTMANAGER_URL": alertmanager.url, "MAC_ALERTMANAGER_MANAGED": "0"},
    )
    try:
        cookie = {"Cookie": stack.session()}
        alerts = f"{stack.url}/alerts.json"
        with Stopped(alertmanager.proc.pid), Burst(alerts, BURST, cookie) as burst:
            time.sleep(0.3)
            door = sample_front_door(stack.url, ALERTS_DEADLINE + 1, prefix="am")
    finally:
        stack.stop()
        alertmanager.stop()

    for answer in burst.answers:
        assert answer.status == 503, answer
        assert answer.body["available"] is False and answer.body["error"], answer
        assert answer.seconds < ALERTS_DEADLINE + SLACK, answer
    _front_door_kept_open(door, ALERTS_DEADLINE)


def _worker_and_beat(stack: Stack, tmp_path: Path) -> subprocess.Popen:
    """mac-worker with its beat in one process (celery -B), on the stack's settings."""
    celery = str(Path(sys.executable).with_name("celery"))
    log = (tmp_path / "worker.log").open("wb")
    return subprocess.Popen(
        [celery, "-A", "macweb", "worker", "-B", "--pool=solo", "-l", "info",
         "-s", str(tmp_path / "beat-schedule"), "--without-heartbeat", "--without-gossip",
         "--without-mingle"],
        env=stack.env, cwd=stack.repo, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _mac_silences(alertmanager: AlertmanagerServer) -> list[dict]:
    return [
        s
        for s in alertmanager.get("/api/v2/silences")
        if s["createdBy"] == "mac" and s["status"]["state"] == "active"
    ]


def test_redis_frozen_the_maintenance_switch_answers_and_the_silence_follows(tmp_path):
    private = PrivateRedis(tmp_path)
    private.start()
    alertmanager = _alertmanager(tmp_path)
    stack = start_stack(
        tmp_path / "master",
        {
            "MAC_REDIS_URL": private.url,
            "MAC_ALERTMANAGER_URL": alertmanager.url,
            "MAC_ALERTMANAGER_MANAGED": "0",
            "MAC_ALERT_POLL_INTERVAL": "1",
        },
    )
    worker = _worker_and_beat(stack, tmp_path)
    try:
        node = _node(stack)
        auth = {"Authorization": f"Token {stack.staff_token()}"}
        url = f"{stack.url}/api/v1/nodes/{node}/maintenance"
        warm = call(url, {"maintenance": False}, method="PUT", headers=auth)
        assert warm.status == 200, warm  # the API worker's broker connection is open
        with Stopped(private.process.pid):
            switched = call(url, {"maintenance": True}, method="PUT", headers=auth)
            time.sleep(3)  # a hang, not a blip
        # Thawed: beat's poll puts the silence in, with nothing else written.
        wait_for(lambda: _mac_silences(alertmanager), timeout=60, interval=0.5)
        [silence] = _mac_silences(alertmanager)
    except AssertionError:
        print(stack.log_tail(), (tmp_path / "worker.log").read_text(errors="replace")[-3000:])
        raise
    finally:
        stop_process(worker)
        stack.stop()
        alertmanager.stop()
        private.stop()

    assert switched.status == 200, switched
    assert switched.seconds < SWITCH_BOUND, switched
    assert switched.body["maintenance"] is True and switched.body["changed"] is True
    assert "the silence update was not queued" in switched.body["deferred"], switched
    assert {m["name"]: m["value"] for m in silence["matchers"]}["node"] == str(node)


def _tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)


def _fill(path: Path) -> None:
    """Write zeros into `path` until its file system is full."""
    with path.open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_config_folder_leaves_the_channel_pending_until_space_is_freed(tmp_path):
    folder = tmp_path / "alertmanager"
    _tmpfs(folder, "256k")
    alertmanager = None
    stack = worker = None
    try:
        env = {
            "MAC_ALERTMANAGER_DIR": str(folder),
            "MAC_ALERT_POLL_INTERVAL": "1",
            # The channel's webhook is on this host's loopback, which the channel address
            # policy refuses unless the site allows it.
            "MAC_CHANNEL_ALLOWED_NETWORKS": "127.0.0.0/8",
        }
        am_port = free_port()
        env["MAC_ALERTMANAGER_URL"] = f"http://127.0.0.1:{am_port}"
        stack = start_stack(tmp_path / "master", env)
        stack.manage("from alerting.services import apply_channels; apply_channels(reload=False)")
        alertmanager = AlertmanagerServer(
            folder / "alertmanager.yml", tmp_path / "am", port=am_port
        )
        alertmanager.start()
        worker = _worker_and_beat(stack, tmp_path)
        filler = folder / "filler"
        _fill(filler)

        staff = {"Authorization": f"Token {stack.staff_token()}"}
        saved = call(
            f"{stack.url}/api/v1/alert-channels/",
            {"name": "ops-hook", "kind": "webhook", "url": "http://127.0.0.1:9/hook"},
            headers=staff,
        )
        health = call(f"{stack.url}/health", headers=staff).body  # the names: logged in only
        filler.unlink()

        receiver = f"mac-channel-{saved.body['detail'].split('(id ')[1].split(')')[0]}"

        def loaded() -> bool:
            status = alertmanager.get("/api/v2/status")
            return f"name: {receiver}\n" in status["config"]["original"]

        assert saved.status == 503, saved
        wait_for(loaded, timeout=60, interval=0.5)
        after = call(f"{stack.url}/health").body
    finally:
        if worker is not None:
            stop_process(worker)
        if stack is not None:
            stack.stop()
        if alertmanager is not None:
            alertmanager.stop()
        subprocess.run(["umount", str(folder)], check=False)

    assert saved.status == 503, saved
    assert "No space left on device" in saved.body["detail"], saved
    assert str(folder) in saved.body["detail"] and "MAC_ALERTMANAGER_DIR" in saved.body["detail"]
    assert "alert_config" in health["degraded"], health
    assert "'ops-hook' is saved but pending" in health["checks"]["alert_config"]["detail"]
    assert "alert_config" not in after["degraded"], after
