"""Fault D4 of issue 19: the master's worker consumes MAC_PROBE_QUEUE under both runtimes.

The master's worker used to consume only Celery's default queue: with the chunk tasks
routed to `probe`, sharded sweeps never finished and /health blamed mac-worker and
mac-beat, both running. Now the worker consumes every queue the settings name. The
whole master runs as `mac start master` runs it (process runtime: gunicorn, a prefork
worker, beat, Prometheus) on this run's PostgreSQL test database and Redis db, over a
simulated fleet split into three chunks. Under Docker the worker gets the same
settings (the compose file passes MAC_PROBE_QUEUE to it and adds no -Q).
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest
import yaml

from healthcheck.state import get_redis, sweep_history, sweep_prefix
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.healthcheck.conftest import subprocess_env

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "docker-compose.master.yml"

QUEUE = "probe"  # the operator's value in the fault report


@pytest.fixture
def clean_redis():
    client = get_redis()

    def clear() -> None:
        for key in client.scan_iter(match="*:sweep:*"):
            client.delete(key)
        client.delete(QUEUE, f"_kombu.binding.{QUEUE}", "celery", "unacked", "unacked_index")

    clear()
    yield client
    clear()


def _health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_compose_worker_gets_the_probe_queue_and_consumes_every_queue():
    worker = yaml.safe_load(COMPOSE.read_text())["services"]["worker"]
    # Passed through from mac's environment and env files (the settings' defaults else).
    assert worker["environment"]["MAC_PROBE_QUEUE"] is None
    assert worker["environment"]["MAC_SWEEP_CHUNK_SIZE"] is None
    assert worker["environment"]["MAC_REDIS_URL"] == "redis://redis:6379/0"  # the shared rest
    command = worker["command"][-1]
    assert "exec python -m celery -A macweb worker" in command and " -Q" not in command


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus is missing")
def test_the_masters_worker_consumes_the_probe_queue(
    mac_env, transactional_db, clean_redis, fleet, make_node
):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the master shares the test database: needs PostgreSQL")
    runner = fleet(6)
    for node in runner.nodes:
        make_node(ip=node.ip)
    mac_env.env.pop("SECRET_KEY", None)
    mac_env.env.update(
        {
            "DATABASE_URL": subprocess_env()["DATABASE_URL"],
            "MAC_DATA_DIR": str(mac_env.root / "data"),
            "MAC_MASTER_PORT": str(free_port()),
            "MAC_MASTER_BIND": "127.0.0.1",
            "MAC_API_WORKERS": "1",
            "MAC_ADMIN_PASSWORD": "admin-pass-for-tests",
            "MAC_PROBE_INTERVAL": "3",
            "MAC_PROBE_TIMEOUT": "0.5",
            "MAC_SWEEP_CHUNK_SIZE": "2",
            "MAC_PROBE_QUEUE": QUEUE,
        }
    )
    worker_log = mac_env.state_dir / "master" / "logs" / "worker.log"
    master = sweep_prefix(mac_env.env["MAC_CACHE_PREFIX"])  # where its sweeps are recorded
    try:
        started = mac_env.run("start", "master", timeout=240)
        assert started.returncode == 0, started.stdout + started.stderr
        try:
            sweeps = wait_for(
                lambda: [s for s in sweep_history(clean_redis, master) if s["chunks"] == 3][:2],
                timeout=90,
                interval=0.5,
            )
        except AssertionError:
            log = worker_log.read_text(errors="replace")[-4000:]
            pytest.fail(f"no sharded sweep finished; the worker's log:\n{log}")
        status, body = _health(int(mac_env.env["MAC_MASTER_PORT"]))
        log = worker_log.read_text(errors="replace")
    finally:
        stopped = mac_env.run("stop", "master")
    assert stopped.returncode == 0, stopped.stderr
    assert sweeps[0]["nodes"] == 6 and sweeps[0]["online"] == 6, sweeps[0]
    assert (status, body["status"]) == (200, "ok"), body
    assert body["checks"]["queues"]["ok"], body["checks"]["queues"]
    # Celery's banner lists what the worker consumes: both queues, from the settings.
    queues = log[log.index("[queues]") :].split("[tasks]")[0]
    assert ".> celery" in queues and f".> {QUEUE}" in queues, queues
    assert "healthcheck.tasks.probe_chunk[" in log
