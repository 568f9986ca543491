"""Community dashboards' queries against MAC's exporters, through a real Prometheus.

For every list in tests/exporters/dashboards/ a real Prometheus scrapes the exporter
the list names (GPU exporters on their recorded fake hardware) with MAC's target
labels, and the test asks Prometheus' HTTP API what a Grafana panel would: the
variables' label_values(), then each metric name with the panel's matchers
substituted. Every name must return series, with the listed type and labels, and
no label may have been renamed ``exported_*`` by a collision with a target label.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator

import pytest

from testkit.ports import free_port
from tests.exporters.conftest import FIXTURES, ROOT, http_get
from tests.exporters.dashboards import QueryList, all_lists
from tests.exporters.test_prometheus import prometheus  # noqa: F401 (the fixture)

# Slow, but it only waits (up to 60 s for two scrapes) and owns nothing of the host:
# beside the heavy tests on the quick xdist worker (testkit.xdistworker).
pytestmark = [pytest.mark.prometheus, pytest.mark.slow, pytest.mark.no_deadline]

# MAC's file-SD target labels for the node (scraping.targets writes the same keys;
# cluster_name is MAC_CLUSTER_NAME, which AMD's dashboards start from).
TARGET_LABELS = {
    "node": "17",
    "hostname": "gpu17",
    "gpu_vendor": "nvidia",
    "maintenance": "false",
    "cluster_name": "mac",
}
EXPORTER_HOSTNAME = "gpu-node-17"  # what the node itself reports as its host name
# A series present only from the second scrape on (GPM needs two samples): ready then.
READY_QUERY = {"dcgm-exporter": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"}


def _fake_dcgm_exporter(port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "testkit.fakes.nvml", "--port", str(port),
         "--hostname", EXPORTER_HOSTNAME],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _module(*argv: str) -> Callable[[int], subprocess.Popen]:
    def start(port: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", *argv, "--bind", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    return start


# job -> how to run that exporter: GPU and NIC exporters on recorded hardware, and
# sys-exporter as `mac` runs it: the real node_exporter on this machine's /proc and /sys.
EXPORTERS: dict[str, Callable[[int], subprocess.Popen]] = {
    "dcgm-exporter": _fake_dcgm_exporter,
    "rocm-exporter": _module("testkit.fakes.amdsmi"),
    "nic-exporter": _module("exporters", "nic-exporter", "--sys-root", str(FIXTURES / "sysfs-ib")),
    "sys-exporter": _module("exporters", "sys-exporter"),
}
LISTS = all_lists()


def api(url: str, path: str, **params: str) -> list | dict:
    status, body, _ = http_get(f"{url}{path}?{urllib.parse.urlencode(params)}", timeout=5)
    assert status == 200, f"{path} {params}: HTTP {status}: {body}"
    return json.loads(body)["data"]


def query(url: str, promql: str) -> list[dict]:
    return api(url, "/api/v1/query", query=promql)["result"]


@pytest.fixture
def scraped(prometheus) -> Iterator[Callable[[str], str]]:  # noqa: F811
    """job -> URL of a Prometheus that has scraped that exporter at least twice."""
    processes: list[subprocess.Popen] = []

    def start(job: str) -> str:
        if job not in EXPORTERS:
            pytest.fail(f"no recorded exporter for job {job!r}: add it to EXPORTERS")
        port = free_port()
        process = EXPORTERS[job](port)
        processes.append(process)
        url = prometheus({job: f"127.0.0.1:{port}"}, labels=TARGET_LABELS)
        ready = READY_QUERY.get(job, f'up{{job="{job}"}} == 1')
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"{job} exited {process.returncode}: {process.stderr.read()}")
            try:
                if query(url, ready):
                    return url
            except (OSError, AssertionError):
                pass  # Prometheus still starting
            time.sleep(0.5)
        pytest.fail(f"Prometheus had no {ready} from {job} after 60s")

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


def _variable_values(url: str, queries: QueryList) -> dict[str, list[str]]:
    values = {}
    for name, variable in queries.variables.items():
        found = api(url, f"/api/v1/label/{variable.label}/values", **{"match[]": variable.metric})
        assert found, (
            f"{queries.title}: ${name} = label_values({variable.metric}, {variable.label}) is empty"
        )
        values[name] = found
    return values


def _supplied_here(url: str, queries: QueryList) -> list[str]:
    """The listed names the exporter supplies: all, or for one reading this host, its own.

    A host-dependent exporter (node_exporter) is asked directly what it exposes on the
    test machine; Prometheus must then return series for every one of those.
    """
    if not queries.host_dependent:
        return list(queries.metrics)
    target = next(t for t in api(url, "/api/v1/targets")["activeTargets"]
                  if t["labels"]["job"] == queries.job)  # fmt: skip
    _, body, _ = http_get(target["scrapeUrl"])
    exposed = {line.split("{")[0].split(" ")[0] for line in body.splitlines()
               if line and not line.startswith("#")}  # fmt: skip
    names = [name for name in queries.metrics if name in exposed]
    print(f"{queries.title}: {len(names)} of {len(queries.metrics)} names exposed here; "
          f"absent: {sorted(set(queries.metrics) - set(names))}")  # fmt: skip
    return names


@pytest.mark.parametrize("queries", LISTS, ids=[q.path.stem for q in LISTS])
def test_every_dashboard_query_returns_series(scraped, queries: QueryList):
    url = scraped(queries.job)
    values = _variable_values(url, queries)
    supplied = _supplied_here(url, queries)
    empty = [name for name in supplied if not query(url, queries.selector(name, values))]
    assert not empty, f"{queries.title}: no series for {empty}"
    present = [name for name in queries.unsupported if query(url, name)]
    assert not present, f"{queries.title}: listed as unsupported but served: {present}"
    metadata = api(url, "/api/v1/metadata")
    types = {name: metadata[name][0]["type"] for name in queries.types if name in metadata}
    assert types == queries.types, f"{queries.title}: types differ from the original exporter's"
    for name in supplied:
        for series in query(url, name):
            labels = set(series["metric"])
            assert not {label for label in labels if label.startswith("exported_")}, series
            missing = set(queries.labels) - labels
            assert not missing, f"{name} lacks {sorted(missing)}: {series['metric']}"


def test_exporter_and_target_host_labels_live_side_by_side(scraped):
    """dcgm-exporter's ``Hostname`` and MAC's target ``hostname`` are two labels, both kept."""
    url = scraped("dcgm-exporter")
    series = query(url, "DCGM_FI_DEV_GPU_TEMP")
    assert {s["metric"]["Hostname"] for s in series} == {EXPORTER_HOSTNAME}
    assert {s["metric"]["hostname"] for s in series} == {TARGET_LABELS["hostname"]}
    assert {s["metric"]["node"] for s in series} == {TARGET_LABELS["node"]}
