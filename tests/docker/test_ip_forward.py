"""The guide's ip_forward failure with real Docker: forwarding off in the node's namespace.

The node (the engine's namespace) runs the agent containers behind Docker's own DNAT;
the master runs in another namespace, the host's, under the process runtime on
198.18.250.1 (its own address there, so its ports collide with nothing). Only the
node namespace's own net.ipv4.ip_forward is changed, never the host's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from testkit.docker_engine import HOST_IP, NS_IP
from tests.docker.conftest import REPO, http_status, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
INTERVAL, TIMEOUT = 3.0, 2.0  # MAC_PROBE_INTERVAL and MAC_PROBE_TIMEOUT of node_env


@pytest.fixture
def host_master(engine, tmp_path) -> Iterator[str]:
    """`mac start master --runtime process` on the host's 198.18.250.1; stopped after."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAC_")}
    env.pop("DATABASE_URL", None)  # its own SQLite inventory
    env.update(
        {
            "HOME": str(tmp_path),
            "MAC_USER_ENV_FILE": str(tmp_path / "user-env"),
            "MAC_NODE_ENV_FILE": str(tmp_path / "node-env"),
            "MAC_STATE_DIR": str(tmp_path / "master-state"),
            "MAC_DATA_DIR": str(tmp_path / "master-data"),
            "MAC_MASTER_BIND": HOST_IP,
            "MAC_REDIS_URL": os.environ.get("MAC_REDIS_URL") or "redis://127.0.0.1:6379/14",
            "MAC_PROBE_INTERVAL": str(INTERVAL),
            "MAC_PROBE_TIMEOUT": str(TIMEOUT),
            "MAC_RUNTIME": "process",
            "PYTHONPATH": str(REPO),
        }
    )

    def mac(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "maccli.main", *args],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )  # fmt: skip

    started = mac("start", "master")
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield HOST_IP
    finally:
        mac("stop", "master")


def _prometheus_jobs() -> dict[str, str]:
    url = f"http://{HOST_IP}:29090/api/v1/targets"
    with urllib.request.urlopen(url, timeout=5) as response:
        targets = json.load(response)["data"]["activeTargets"]
    return {t["labels"].get("job", ""): t["health"] for t in targets}


def test_forwarding_off_takes_the_node_offline_with_the_ip_forward_diagnosis(
    images, host_master, node
):
    node.env["MASTER_IP"] = host_master
    started = node.mac("start", "agent")
    assert started.returncode == 0, started.stdout + started.stderr
    wait_for("Online", lambda: node.master_node().get("status") == "online", timeout=60)

    node.engine.set_ip_forward(False)
    assert http_status(f"http://{NS_IP}:29500/metrics") == 200
    assert http_status(f"http://{NS_IP}:29101/metrics", timeout=3) == 0  # times out
    offline = wait_for(
        "Offline with the ip_forward diagnosis",
        lambda: (n := node.master_node()).get("status") == "offline" and n.get("diagnosis") and n,
        timeout=60,
    )
    assert "ip_forward" in json.dumps(offline)
    # The master's Prometheus keeps scraping nic-exporter; sys-exporter has dropped out.
    # (A target's health stays "unknown" until its first scrape, up to a scrape interval.)
    jobs = wait_for(
        "sys-exporter out of Prometheus's targets, nic-exporter scraped",
        lambda: (
            "sys-exporter" not in (j := _prometheus_jobs())
            and j.get("nic-exporter") != "unknown"
            and j
        ),
        timeout=60,
    )
    assert jobs.get("nic-exporter") == "up", jobs
    doctor = node.mac("doctor", "--json")
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}
    forwarding = next(c for key, c in checks.items() if "forward" in key)
    assert forwarding["status"] == "fail"
    assert "sysctl -w net.ipv4.ip_forward=1" in forwarding["fix"]

    node.engine.set_ip_forward(True)
    back = time.monotonic()
    wait_for("Online again", lambda: node.master_node().get("status") == "online", timeout=60)
    # One interval plus the probe timeout, and the time a `mac status` takes to ask.
    assert time.monotonic() - back <= INTERVAL + TIMEOUT + 3
