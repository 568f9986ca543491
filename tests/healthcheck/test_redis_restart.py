"""Redis restarts while a sweep is running: the worker survives and sweeps go on.

Before macweb.broker, kombu's restore of the sweep's unacked message after the broker
connection dropped raised AttributeError ("'NoneType' object has no attribute
'hostname'"), which Celery treats as unrecoverable: the worker exited and sweeps
stopped for good. The worker here runs as `mac start master` runs it (prefork pool,
heartbeat, gossip and mingle on), against a private redis-server that the test
restarts mid-sweep, several times.
"""

from __future__ import annotations

import pytest

from healthcheck.state import sweep_count
from testkit.simfleet import Mode
from testkit.waiting import wait_for
from tests.healthcheck.conftest import CELERY, subprocess_env
from tests.healthcheck.private_servers import PrivateRedis

pytestmark = pytest.mark.slow

INTERVAL, TIMEOUT = 2.0, 1.5  # the hanging node keeps every sweep in flight for 1.5 s
RESTARTS = 4


def test_it_keeps_sweeping_across_redis_restarts_during_sweeps(
    transactional_db, processes, tmp_path, fleet, make_node
):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the worker shares the test database: needs PostgreSQL")
    broker = PrivateRedis(tmp_path)
    broker.start()
    runner = fleet(2)
    runner.set_node_mode(1, Mode.HANG)
    for node in runner.nodes:
        make_node(ip=node.ip)
    env = subprocess_env(
        MAC_REDIS_URL=broker.url,
        MAC_PROBE_INTERVAL=str(INTERVAL),
        MAC_PROBE_TIMEOUT=str(TIMEOUT),
        MAC_SD_DIR=str(tmp_path / "targets"),
    )
    worker = processes.start(
        "worker",
        [CELERY, "-A", "macweb", "worker", "-l", "INFO", "--concurrency", "2",
         "-n", "mac-worker@%h"],
        env,
    )  # fmt: skip
    processes.start(
        "beat",
        [CELERY, "-A", "macweb", "beat", "-l", "INFO", "-s", str(tmp_path / "beat"),
         "--pidfile="],
        env,
    )  # fmt: skip
    hanging = runner.nodes[1].ports["sys-exporter"]
    try:
        wait_for(lambda: sweep_count(broker.client()) >= 1, timeout=60, interval=0.2)
        for restart in range(RESTARTS):
            # Mid-sweep: the hanging node has a fresh probe open, the message is unacked.
            seen = hanging.requests
            wait_for(lambda seen=seen: hanging.requests > seen, timeout=30, interval=0.02)
            broker.stop()
            broker.start()  # empty: the restart lost every key, the count starts again
            wait_for(
                lambda: worker.poll() is not None or sweep_count(broker.client()) >= 1,
                timeout=45,
                interval=0.2,
            )
            assert worker.poll() is None, f"the worker died at restart {restart + 1}"
    except AssertionError as exc:
        pytest.fail(f"{exc}\n{processes.logs()}")
    finally:
        processes.stop_all()
        broker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert "Unrecoverable error" not in log, log[-3000:]
