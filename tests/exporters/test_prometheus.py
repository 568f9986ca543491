"""A real Prometheus scrapes all eight services of a local agent: every target is up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse

import pytest
import yaml

from contract.services import SERVICES
from testkit.ports import free_port
from tests.exporters.conftest import fixture_roots_args, http_get

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SYS_TREE = {
    "nic-exporter": "sysfs-ib",
    "rocm-exporter": "sysfs-amd",
    "mango-sdk-agent": "sysfs-amd",
}

# Slow, but it only waits (up to 60 s for every target) and owns nothing of the host:
# beside the heavy tests on the quick xdist worker (testkit.xdistworker).
pytestmark = [pytest.mark.prometheus, pytest.mark.slow, pytest.mark.no_deadline]


@pytest.fixture
def prometheus(tmp_path):
    if not os.path.exists(PROMETHEUS):
        pytest.skip("Debian's prometheus is not installed (scripts/bootstrap installs it)")
    processes: list[subprocess.Popen] = []

    def start(targets: dict[str, str], labels: dict[str, str] | None = None) -> str:
        # labels: target labels, as MAC's file-SD targets carry (node, hostname...)
        static = {"labels": labels} if labels else {}
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [target], **static}]}
                for job, target in targets.items()
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        processes.append(
            subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        return f"http://127.0.0.1:{port}"

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


def test_prometheus_scrapes_all_eight_services(prometheus, start_exporter):
    targets = {}
    for service in SERVICES:
        process = start_exporter(
            service.name,
            *fixture_roots_args(SYS_TREE.get(service.name, "sysfs-net")),
            ready=service.liveness_path,
        )
        targets[service.name] = f"127.0.0.1:{process.port}"
    url = prometheus(targets)
    deadline = time.monotonic() + 60
    health: dict[str, str] = {}
    while time.monotonic() < deadline:
        try:
            status, body, _ = http_get(f"{url}/api/v1/targets", timeout=2)
        except OSError:
            status = 0
        if status == 200:
            active = json.loads(body)["data"]["activeTargets"]
            health = {t["labels"]["job"]: t["health"] for t in active}
            if len(health) == len(SERVICES) and set(health.values()) == {"up"}:
                break
        time.sleep(0.5)
    assert health == {service.name: "up" for service in SERVICES}
    # And the data is queryable: every service says which MAC serves it (sys-exporter,
    # node_exporter, through MAC's textfile facts).
    query = "count(mac_exporter_build_info) by (job)"
    _, body, _ = http_get(f"{url}/api/v1/query?query={urllib.parse.quote(query)}")
    jobs = {r["metric"]["job"] for r in json.loads(body)["data"]["result"]}
    assert jobs == {service.name for service in SERVICES}
