"""Every service as a real process: liveness URL, /metrics and /health over HTTP."""

from __future__ import annotations

import json

import pytest

from contract.services import SERVICES
from tests.exporters.conftest import FIXTURES, GOLDEN, fixture_roots_args, normalise

SYS_TREE = {
    "nic-exporter": "sysfs-ib",
    "rocm-exporter": "sysfs-amd",
    "mango-sdk-agent": "sysfs-amd",
}


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s.name)
def test_service_answers_its_liveness_url_and_metrics(service, start_exporter):
    process = start_exporter(
        service.name, *fixture_roots_args(SYS_TREE.get(service.name, "sysfs-net"))
    )
    status, _, _ = process.get(service.liveness_path)
    assert status == 200
    status, metrics, headers = process.get("/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    assert f'mac_exporter_build_info{{service="{service.name}"' in metrics
    if service.name == "sys-exporter":  # node_exporter: its own success gauges, no /health
        assert 'node_scrape_collector_success{collector="textfile"} 1' in metrics
        return
    assert "mac_exporter_collector_success{" in metrics
    health = process.json("/health")
    assert health["service"] == service.name
    assert health["status"] in ("ok", "degraded")


def test_dcgm_exporter_without_a_driver_serves_the_reason(start_exporter):
    process = start_exporter("dcgm-exporter", *fixture_roots_args())
    _, metrics, _ = process.get("/metrics")
    assert "mac_gpu_count 0.0" in metrics
    line = next(line for line in metrics.splitlines() if line.startswith(
        'mac_exporter_backend_available{backend="nvml"'))  # fmt: skip
    assert line.endswith(" 0.0") and 'reason=""' not in line
    assert process.json("/health")["backends"]["nvml"]["available"] is False


def test_sys_manager_diagnostics_answers_the_checks(start_exporter):
    process = start_exporter("sys-manager", *fixture_roots_args())
    body = process.json("/diagnostics")
    assert isinstance(body["ok"], bool)
    assert body["checks"], "run_checks returned nothing"
    for check in body["checks"]:
        assert set(check) == {"id", "title", "status", "detail", "fix"}
        assert check["status"] in ("pass", "warn", "fail", "skip")
    assert body["ok"] == all(check["status"] != "fail" for check in body["checks"])


def test_mango_sdk_agent_docs_work_offline_and_list_the_api(start_exporter):
    process = start_exporter("mango-sdk-agent", *fixture_roots_args("sysfs-amd"), ready="/docs")
    status, page, _ = process.get("/docs")
    assert status == 200
    assert "/static/swagger-ui/swagger-ui-bundle.js" in page
    assert "cdn.jsdelivr.net" not in page and "unpkg.com" not in page
    status, _, _ = process.get("/static/swagger-ui/swagger-ui-bundle.js")
    assert status == 200
    paths = process.json("/openapi.json")["paths"]
    assert {"/v1/inventory", "/v1/gpus", "/v1/nics", "/v1/rdma", "/v1/bmc"} <= set(paths)
    gpus = process.json("/v1/gpus")
    assert [(g["vendor"], g["model"]) for g in gpus] == [("amd", "AMD Instinct MI300X")] * 2
    inventory = process.json("/v1/inventory")
    assert inventory["software"]["rocm"] == "6.2.4"
    assert inventory["bmc"]["answers"] is False


def test_mango_sdk_agent_lists_rdma_devices(start_exporter):
    process = start_exporter("mango-sdk-agent", *fixture_roots_args("sysfs-ib"), ready="/docs")
    rdma = {dev["device"]: dev for dev in process.json("/v1/rdma")}
    assert rdma["bnxt_re0"]["vendor"] == "broadcom"
    assert rdma["mlx5_0"]["ports"][0]["state"] == "ACTIVE"
    nics = {nic["name"]: nic for nic in process.json("/v1/nics")}
    assert nics["enp65s0"]["driver"] == "mango_gpuboost"


def test_sys_exporter_is_node_exporter_on_this_machines_proc_and_sys(start_exporter):
    process = start_exporter("sys-exporter")  # default roots: the real /proc, /sys and /
    _, metrics, _ = process.get("/metrics")
    assert 'node_cpu_seconds_total{cpu="0",mode="idle"}' in metrics
    assert "node_memory_MemAvailable_bytes" in metrics
    # The collectors MAC turns on beyond node_exporter's defaults answer here.
    for collector in ("processes", "interrupts", "tcpstat", "textfile"):
        assert f'node_scrape_collector_success{{collector="{collector}"}} 1' in metrics
    # nic-exporter owns node_infiniband_*: one source per series.
    assert 'node_scrape_collector_success{collector="infiniband"}' not in metrics


def test_rocm_exporter_serves_this_machines_real_proc_and_sys(start_exporter):
    process = start_exporter("rocm-exporter")  # default roots: the real /proc, /sys and /dev
    _, metrics, _ = process.get("/metrics")
    collectors = [
        line for line in metrics.splitlines() if line.startswith("mac_exporter_collector_success")
    ]
    assert collectors and all(line.endswith(" 1.0") for line in collectors), collectors
    assert "gpu_nodes_total" in metrics
    assert 'mac_exporter_backend_available{backend="amdgpu"' in metrics


def test_the_real_process_serves_the_golden_output(start_exporter):
    process = start_exporter(
        "rocm-exporter", *fixture_roots_args("sysfs-amd"), env={"NODE_NAME": "gpu-node-17"}
    )
    _, metrics, _ = process.get("/metrics")
    assert normalise(metrics) == (GOLDEN / "rocm-exporter.prom").read_text()


def test_a_gpu_exporter_answers_the_sweeps_verdict_query_with_those_lines_only(start_exporter):
    from contract.liveness import check_url
    from contract.services import BY_NAME
    from contract.verdicts import parse_verdicts

    rocm = BY_NAME["rocm-exporter"]
    process = start_exporter(
        "rocm-exporter", *fixture_roots_args("sysfs-amd"), env={"NODE_NAME": "gpu-node-17"}
    )
    status, page, _ = process.get(rocm.probe_target)
    assert status == 200
    names = {line.split("{")[0].split(" ")[0] for line in page.splitlines() if line[:1] != "#"}
    assert names == {"mac_gpu_health", "mac_gpu_health_evidence", "mac_node_boot_info"}
    found = parse_verdicts(page.encode(), "amd")
    assert [(gpu.index, gpu.state, gpu.action) for gpu in found.gpus] == [
        ("0", "healthy", "none"),
        ("1", "unhealthy", "reboot"),  # the fixture's card 1 counts uncorrectable errors
    ]
    assert found.boot_id == "0f6c1b52-5d5e-4c1e-9a7d-4b1e2f3a6c80"
    # The liveness judgement is unchanged: the answer is a valid exposition.
    assert check_url("127.0.0.1", process.port, rocm.probe_target).ok


def test_a_gpu_exporter_keeps_its_evidence_in_the_state_folder_it_is_given(
    start_exporter, tmp_path
):
    process = start_exporter("rocm-exporter", *fixture_roots_args("sysfs-amd"),
                             "--state-dir", str(tmp_path / "gpu"))  # fmt: skip
    _, metrics, _ = process.get("/metrics")
    assert 'mac_exporter_backend_available{backend="evidence_state",reason=""} 1.0' in metrics
    kept = json.loads((tmp_path / "gpu" / "gpu-evidence-rocm-exporter.json").read_text())
    assert kept["boot_id"] == (FIXTURES / "proc/sys/kernel/random/boot_id").read_text().strip()
    assert len(kept["gpus"]) == 2
