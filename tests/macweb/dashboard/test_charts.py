"""The chart endpoint against a real Prometheus, and what it says when there is nothing."""

from __future__ import annotations

import json

import pytest
from django.test import Client, override_settings

from alerting import bulkheads
from inventory.choices import GpuVendor, NodeStatus, StatusReason
from macweb.dashboard import charts
from testkit.factories import online_gpu_node
from testkit.fakehttp import JsonHandler, serving
from testkit.ports import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.prometheus]


def chart(client: Client, node, name: str, rng: str = "1h") -> dict:
    response = client.get(f"/nodes/{node.pk}/charts/{name}.json?range={rng}")
    assert response.status_code == 200, response.content
    return response.json()


def drawn_points(data: dict) -> int:
    return sum(v is not None for s in data["series"] for v in s["values"])


@pytest.fixture
def nvidia_node(chart_env):
    return online_gpu_node(
        id=chart_env.nvidia_id,
        hostname=chart_env.nvidia_host,
        gpu_vendor=GpuVendor.NVIDIA,
        gpu_count=4,
    )


@pytest.fixture
def amd_node(chart_env):
    exporters = {"sys-exporter": 29101, "rocm-exporter": 29200, "nic-exporter": 29500}
    return online_gpu_node(
        id=chart_env.amd_id,
        hostname=chart_env.amd_host,
        gpu_vendor=GpuVendor.AMD,
        exporters=exporters,
        ip="10.9.9.9",
    )


def test_cpu_memory_and_rdma_come_from_prometheus(client_user, chart_env, nvidia_node):
    with override_settings(PROMETHEUS_URL=chart_env.prometheus.url):
        cpu = chart(client_user, nvidia_node, "cpu")
        memory = chart(client_user, nvidia_node, "memory")
        rdma = chart(client_user, nvidia_node, "rdma")
    assert cpu["empty_reason"] is None
    assert len(cpu["timestamps"]) == 241  # 1 h at 15 s steps, both ends included
    assert drawn_points(cpu) >= 1
    assert all(0 <= v <= 100 for v in cpu["series"][0]["values"] if v is not None)
    assert 0 < next(v for v in memory["series"][0]["values"] if v is not None) < 100
    assert [s["label"] for s in rdma["series"]] == [
        "rx mlx5_0 port=1",
        "rx mlx5_1 port=1",
        "tx mlx5_0 port=1",
        "tx mlx5_1 port=1",
    ]
    # The counters move at ~9 GB/s; a young series' rate is averaged over the window.
    rx0 = next(v for v in rdma["series"][0]["values"] if v is not None)
    assert 0 < rx0 < 10e9


def test_gpu_charts_use_the_nvidia_names_on_nvidia_nodes(client_user, chart_env, nvidia_node):
    with override_settings(PROMETHEUS_URL=chart_env.prometheus.url):
        data = chart(client_user, nvidia_node, "gpu_util", "24h")
    assert data["queries"] == [f'DCGM_FI_DEV_GPU_UTIL{{node="{chart_env.nvidia_id}"}}']
    assert [s["label"] for s in data["series"]] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    assert data["step"] == 300
    assert drawn_points(data) >= 4


def test_gpu_charts_use_the_amd_names_on_amd_nodes(client_user, chart_env, amd_node):
    with override_settings(PROMETHEUS_URL=chart_env.prometheus.url):
        temp = chart(client_user, amd_node, "gpu_temp")
        power = chart(client_user, amd_node, "gpu_power", "7d")
    assert "gpu_junction_temperature" in temp["queries"][0]
    assert len(temp["series"]) == 4
    assert all(40 <= v <= 80 for s in temp["series"] for v in s["values"] if v is not None)
    assert power["step"] == 1800
    assert drawn_points(power) >= 4


def test_a_node_without_gpus_has_no_gpu_chart_and_says_so(client_user, chart_env):
    node = online_gpu_node(hostname="cpu-only", gpu_vendor=GpuVendor.NONE, gpu_count=0)
    with override_settings(PROMETHEUS_URL=chart_env.prometheus.url):
        data = chart(client_user, node, "gpu_util")
    assert data["series"] == []
    assert "reports no GPUs" in data["empty_reason"]


def test_an_exporter_the_agent_did_not_register_is_named(client_user, chart_env):
    node = online_gpu_node(hostname="no-nic", exporters={"sys-exporter": 29101})
    with override_settings(PROMETHEUS_URL=chart_env.prometheus.url):
        data = chart(client_user, node, "rdma")
    assert "did not register a nic-exporter" in data["empty_reason"]


def test_no_samples_yet_says_so(client_user, chart_env):
    node = online_gpu_node(hostname="brand-new")
    with override_settings(PROMETHEUS_URL=chart_env.prometheus.url):
        data = chart(client_user, node, "cpu")
    assert data["empty_reason"].startswith("No data yet")


def test_an_offline_node_without_samples_points_at_the_diagnosis(client_user, chart_env):
    node = online_gpu_node(
        hostname="gone", status=NodeStatus.OFFLINE, status_reason=StatusReason.TIMEOUT
    )
    with override_settings(PROMETHEUS_URL=chart_env.prometheus.url):
        data = chart(client_user, node, "memory")
    assert "is offline" in data["empty_reason"]


def test_an_offline_node_whose_nic_exporter_answers_is_not_called_dropped():
    # ip_forward=0: the node is Offline but nic-exporter is still a target.
    node = online_gpu_node(
        hostname="no-forwarding",
        status=NodeStatus.OFFLINE,
        status_reason=StatusReason.TIMEOUT,
        exporter_health={"sys-exporter": False, "nic-exporter": True},
    )

    nic = charts.empty_data_reason(node, "nic-exporter", "1h")
    sys = charts.empty_data_reason(node, "sys-exporter", "1h")

    assert nic.startswith("No data yet") and "offline" not in nic
    assert "is offline, so its sys-exporter target was dropped" in sys


def test_prometheus_down_is_the_reason(client_user):
    node = online_gpu_node()
    down = f"http://127.0.0.1:{free_port()}"
    with override_settings(PROMETHEUS_URL=down, DASHBOARD_PROMETHEUS_TIMEOUT=2):
        response = client_user.get(f"/nodes/{node.pk}/charts/cpu.json")
    assert response.status_code == 503
    assert response["Retry-After"]
    data = response.json()
    assert data["series"] == [] and data["available"] is False
    assert data["empty_reason"].startswith(f"Prometheus at {down} is unreachable")
    assert "mac status master" in data["empty_reason"]


def test_a_site_prometheus_behind_basic_auth_is_named_without_its_password(client_user):
    node = online_gpu_node()
    port = free_port()
    site = f"http://mac:pr0m-secret@127.0.0.1:{port}/prom"
    with override_settings(PROMETHEUS_URL=site, DASHBOARD_PROMETHEUS_TIMEOUT=2):
        data = client_user.get(f"/nodes/{node.pk}/charts/cpu.json").json()
    assert data["empty_reason"].startswith(f"Prometheus at http://127.0.0.1:{port}/prom is ")
    assert "pr0m-secret" not in data["empty_reason"] and "mac:" not in data["empty_reason"]


def test_bad_range_chart_or_node_are_named(client_user):
    node = online_gpu_node()
    bad_range = client_user.get(f"/nodes/{node.pk}/charts/cpu.json?range=3w")
    assert bad_range.status_code == 400
    assert "range" in bad_range.json()
    assert client_user.get(f"/nodes/{node.pk}/charts/disk.json").json()["chart"]
    assert client_user.get(f"/nodes/{node.pk}/charts/disk.json").status_code == 404
    assert client_user.get("/nodes/999999/charts/cpu.json").status_code == 404


def test_charts_need_a_login():
    response = Client().get("/nodes/1/charts/cpu.json")
    assert response.status_code == 401


def test_hostnames_are_quoted_in_promql():
    assert charts.promql_string('a"b\\c') == '"a\\"b\\\\c"'


def test_every_targets_own_labels_stay_out_of_series_names():
    metric = {"device": "mlx5_0", "port": "1", "cluster_name": "mac", "maintenance": "false"}
    assert charts.series_name("rx", {**metric, "node": "3", "job": "nic-exporter"}) == (
        "rx mlx5_0 port=1"
    )


def test_a_chart_past_the_prometheus_bulkhead_answers_503_with_the_reason(client_user):
    node = online_gpu_node()
    with override_settings(BULKHEAD_PROMETHEUS=1):
        bulkheads.PROMETHEUS.reset()
        try:
            with bulkheads.PROMETHEUS.slot():  # another request waits on Prometheus
                response = client_user.get(f"/nodes/{node.pk}/charts/cpu.json")
        finally:
            bulkheads.PROMETHEUS.reset()
    assert response.status_code == 503
    reason = response.json()["empty_reason"]
    assert "already wait on Prometheus" in reason and "MAC_BULKHEAD_PROMETHEUS=1" in reason


def test_a_nic_without_a_verbs_device_is_named_by_its_interface():
    """GPUBoost counts through ethtool alone: no `device`, so two NICs were both
    "rx port=1"; the interface tells them apart."""
    first = {"iface": "ens1f0", "port": "1", "vendor": "mangoboost", "node": "3"}
    second = {**first, "iface": "ens1f1"}
    names = {charts.series_name("rx", first), charts.series_name("rx", second)}
    assert names == {"rx ens1f0 port=1", "rx ens1f1 port=1"}
    with_device = {**first, "device": "mlx5_0"}
    assert charts.series_name("rx", with_device) == "rx mlx5_0 port=1"


def _store(status: int, body: bytes) -> type[JsonHandler]:
    class Store(JsonHandler):
        def do_GET(self) -> None:
            self.send_json(status, body)

    return Store


def _matrix(*items: object) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": list(items)}}
    ).encode()


@pytest.mark.parametrize(
    "body",
    [
        b"null",
        b"[]",
        b'"success"',
        b'{"status": "success"}',
        b'{"status": "success", "data": null}',
        b'{"status": "success", "data": {"result": {"metric": {}}}}',
        _matrix("a series"),
        _matrix({"metric": "DCGM_FI_DEV_GPU_UTIL", "values": [[1, "1"]]}),
        _matrix({"metric": {"gpu": ["0"]}, "values": [[1, "1"]]}),
        _matrix({"metric": {"gpu": "0"}, "values": [[1, "x"]]}),
        _matrix({"metric": {"gpu": "0"}, "values": [[1]]}),
        _matrix({"metric": {"gpu": "0"}, "values": "1"}),
        _matrix({"metric": {"gpu": "0"}, "values": [["NaN", "1"]]}),
        _matrix({"metric": {"gpu": "0"}, "values": [[1, 10**400]]}),
    ],
    ids=[
        "null", "list", "string", "no-data", "data-null", "result-object", "series-string",
        "metric-string", "label-list", "value-x", "value-missing", "values-string",
        "time-nan", "value-too-large",
    ],
)  # fmt: skip
def test_an_answer_without_the_expected_data_is_said(client_user, body):
    """A store (or something in its place) answering 200 with anything but a matrix: the
    chart says so, never a 500."""
    node = online_gpu_node()
    with serving(_store(200, body)) as url, override_settings(PROMETHEUS_URL=url):
        response = client_user.get(f"/nodes/{node.pk}/charts/gpu_util.json")
    assert response.status_code == 200
    data = response.json()
    assert data["series"] == [] and data["available"] is True
    assert data["empty_reason"].startswith(f"Prometheus at {url} answered without the expected")


TIMED_OUT = {
    "status": "error",
    "errorType": "timeout",
    "error": "query timed out in query execution",
}


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (503, json.dumps(TIMED_OUT).encode(), "HTTP 503: timeout: query timed out in query"),
        (502, b"<html><body>Bad Gateway</body></html>", "HTTP 502"),
        (504, b"<html><body>Gateway Time-out</body></html>", "HTTP 504"),
    ],
    ids=["store-timeout", "proxy-502", "proxy-504"],
)
def test_a_store_or_proxy_that_cannot_answer_now_is_a_503(client_user, status, body, said):
    """The store's own 503 (its query timed out) or a proxy's 502/504: it could not be asked
    in time, which the endpoint answers with 503 and Retry-After, as when it is down."""
    node = online_gpu_node()
    with serving(_store(status, body)) as url, override_settings(PROMETHEUS_URL=url):
        response = client_user.get(f"/nodes/{node.pk}/charts/cpu.json")
    assert response.status_code == 503 and response["Retry-After"]
    data = response.json()
    assert data["series"] == [] and data["available"] is False
    assert data["empty_reason"].startswith(f"Prometheus at {url} could not answer now ({said}")


def test_a_query_the_store_rejects_is_said_with_a_200(client_user):
    """Not a matter of time: asking again gets the same answer."""
    node = online_gpu_node()
    rejected = {"status": "error", "errorType": "execution", "error": "many-to-many matching"}
    store = _store(422, json.dumps(rejected).encode())
    with serving(store) as url, override_settings(PROMETHEUS_URL=url):
        response = client_user.get(f"/nodes/{node.pk}/charts/cpu.json")
    assert response.status_code == 200
    assert response.json()["empty_reason"] == (
        f"Prometheus at {url} rejected the query (execution: many-to-many matching)"
    )
