"""MAC's alert rules (healthcheck/prometheus/alerts.yml) under promtool: valid, and each fires.

Every alert has a `promtool test rules` case built from input series the way the
master's /metrics, Prometheus' ``up``, dcgm-exporter and node_exporter/nic-exporter
write them, with the alert expected (labels and text) when it should fire and
absent when it should not.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from healthcheck.promconfig import ALERT_RULES

pytestmark = pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool (Debian's prometheus package) is not installed"
)

NODE = {"node": "3", "hostname": "gpu-03", "maintenance": "false"}
MASTER = {"job": "mac-master", "instance": "127.0.0.1:28080"}
DCGM = {"job": "dcgm-exporter", "instance": "198.18.0.3:29150", **NODE}
GPU = {
    **DCGM,
    "gpu": "1",
    "UUID": "GPU-a1b2c3d4",
    "pci_bus_id": "00000000:3B:00.0",
    "device": "nvidia1",
    "modelName": "NVIDIA H200",
    "Hostname": "gpu-03",
    "DCGM_FI_DRIVER_VERSION": "550.90.07",
}
IB_PORT = {"job": "sys-exporter", "instance": "198.18.0.3:29101", **NODE, "device": "mlx5_0",
           "port": "1"}  # fmt: skip


def series(name: str, labels: dict, values: str) -> dict:
    inner = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def promtool_test(tmp_path: Path, input_series: list[dict], alerts: list[dict]) -> None:
    """Run one promtool test case; ``alerts`` are alert_rule_test entries."""
    case = {"interval": "1m", "input_series": input_series, "alert_rule_test": alerts}
    tests = {"rule_files": [str(ALERT_RULES)], "evaluation_interval": "1m", "tests": [case]}
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    run = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr


def firing(
    at: str, name: str, labels: dict, summary: str, description: str, **annotations: str
) -> dict:
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [
            {
                "exp_labels": labels,
                "exp_annotations": {
                    "summary": summary,
                    "description": description,
                    **annotations,
                },
            }
        ],
    }


def quiet(at: str, name: str) -> dict:
    return {"eval_time": at, "alertname": name, "exp_alerts": []}


def test_the_rules_file_passes_promtool_check():
    run = subprocess.run(
        ["promtool", "check", "rules", str(ALERT_RULES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 7 rules found" in run.stdout


def test_the_masters_prometheus_config_loads_the_rules(tmp_path):
    out = tmp_path / "prometheus.yml"
    call_command("prometheus_config", "--out", str(out), "--sd-dir", str(tmp_path / "targets"))
    assert yaml.safe_load(out.read_text())["rule_files"] == [str(ALERT_RULES)]
    run = subprocess.run(
        ["promtool", "check", "config", str(out)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 7 rules found" in run.stdout


def test_a_node_offline_for_a_minute_alerts_with_the_masters_diagnosis(tmp_path):
    up = {**MASTER, **NODE, "gpu_vendor": "nvidia"}
    reason = "sys-exporter timed out"
    diagnosis = "IPv4 forwarding is off on the agent (net.ipv4.ip_forward = 0)."
    status = {**MASTER, **NODE, "status": "offline", "reason": reason, "diagnosis": diagnosis}
    resting = {**MASTER, "node": "4", "hostname": "gpu-04", "maintenance": "true"}
    promtool_test(
        tmp_path,
        [
            series("mac_node_up", up, "1 0 0 0"),
            series("mac_node_status", status, "_ 1 1 1"),
            series("mac_node_up", {**resting, "gpu_vendor": "amd"}, "0 0 0 0"),
            series(
                "mac_node_status",
                {**resting, "status": "offline", "reason": "", "diagnosis": ""},
                "1 1 1 1",
            ),
        ],
        [
            quiet("1m", "MacNodeOffline"),  # pending: one failed sweep may be a blip
            firing(
                "2m",
                "MacNodeOffline",
                {**up, **status, "severity": "critical"},
                "Node gpu-03 is offline",
                f"The master's probe of sys-exporter (:29101) on gpu-03 fails: {reason} "
                f"{diagnosis}. Run `mac doctor` on the node.",
            ),
        ],
    )


def test_an_exporter_that_stops_answering_alerts_unless_in_maintenance(tmp_path):
    resting = {**DCGM, "node": "4", "hostname": "gpu-04", "maintenance": "true"}
    promtool_test(
        tmp_path,
        [
            series("up", DCGM, "1 0 0 0 0"),
            series("up", resting, "0 0 0 0 0"),
            series("up", {**MASTER}, "1 1 1 1 1"),
        ],
        [
            quiet("2m", "MacExporterDown"),
            firing(
                "3m",
                "MacExporterDown",
                {**DCGM, "severity": "warning"},
                "dcgm-exporter on gpu-03 does not answer",
                "Prometheus cannot scrape dcgm-exporter at 198.18.0.3:29150. "
                "Run `mac status agent` on the node, or `mac doctor` for the fix.",
            ),
        ],
    )


XID_SUMMARY = "GPU 1 on gpu-03 reported an XID error"
XID_DESCRIPTION = (
    "GPU 1 (GPU-a1b2c3d4, 00000000:3B:00.0) reported an XID; DCGM_FI_DEV_XID_ERRORS holds the "
    "last one. See the kernel log (dmesg | grep -i xid) and NVIDIA's XID catalogue for the action."
)


def test_a_new_xid_alerts_and_a_repeated_one_too(tmp_path):
    promtool_test(
        tmp_path,
        [
            # XID 13 at 2m, then again at 15m (the gauge stays 13, the count rises).
            series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 0 13x20"),
            series("DCGM_EXP_XID_ERRORS_COUNT", {**GPU, "xid": "13"}, "_ _ 1x12 2x8"),
        ],
        [
            quiet("1m", "GpuXidError"),
            firing(
                "2m", "GpuXidError", {**GPU, "severity": "warning"}, XID_SUMMARY, XID_DESCRIPTION
            ),
            quiet("14m", "GpuXidError"),  # old news: nothing new for 10 minutes
            firing(
                "15m", "GpuXidError", {**GPU, "severity": "warning"}, XID_SUMMARY, XID_DESCRIPTION
            ),
        ],
    )


def test_an_exporter_restart_clearing_the_last_xid_is_not_an_xid(tmp_path):
    promtool_test(
        tmp_path,
        [series("DCGM_FI_DEV_XID_ERRORS", GPU, "13x14 0x5")],
        [quiet("16m", "GpuXidError")],
    )


LOST_SUMMARY = "GPU 1 on gpu-03 fell off the bus"
LOST_DESCRIPTION = (
    "NVML reports GPU 1 (GPU-a1b2c3d4, 00000000:3B:00.0) lost (NVML_ERROR_GPU_IS_LOST or XID 79). "
    "Drain the node; the GPU needs a reset or the node a reboot."
)


@pytest.mark.parametrize(
    ("name", "values"), [("mac_gpu_lost", "0 1 1"), ("DCGM_FI_DEV_XID_ERRORS", "0 79 79")]
)
def test_a_gpu_lost_or_xid_79_alerts_that_it_fell_off_the_bus(tmp_path, name, values):
    promtool_test(
        tmp_path,
        [series(name, GPU, values)],
        [
            quiet("0m", "GpuFellOffTheBus"),
            firing(
                "1m",
                "GpuFellOffTheBus",
                {**GPU, "severity": "critical"},
                LOST_SUMMARY,
                LOST_DESCRIPTION,
            ),
        ],
    )


@pytest.mark.parametrize(
    ("name", "labels", "values"),
    [
        ("node_infiniband_state_id", IB_PORT, "4 1 1 1 1"),
        (
            "rdma_link_up",
            {
                **IB_PORT,
                "job": "nic-exporter",
                "instance": "198.18.0.3:29500",
                "vendor": "mellanox",
                "iface": "ens1f0np0",
            },
            "1 0 0 0 0",
        ),
    ],
)
def test_an_rdma_port_down_for_two_minutes_alerts(tmp_path, name, labels, values):
    promtool_test(
        tmp_path,
        [series(name, labels, values)],
        [
            quiet("2m", "RdmaLinkDown"),
            firing(
                "3m",
                "RdmaLinkDown",
                {**labels, "severity": "critical"},
                "RDMA port mlx5_0/1 on gpu-03 is down",
                "The RDMA port mlx5_0 port 1 is not ACTIVE. Check the cable and switch port "
                "(ibstat mlx5_0).",
            ),
        ],
    )


@pytest.mark.parametrize(
    ("counter", "short"),
    [("node_infiniband_symbol_error_total", "symbol_error"),
     ("node_infiniband_link_downed_total", "link_downed"),
     ("node_infiniband_local_ack_timeout_errors_total", "local_ack_timeout_errors")],
)  # fmt: skip
def test_rdma_errors_rising_for_five_minutes_alert(tmp_path, counter, short):
    promtool_test(
        tmp_path,
        [
            series(counter, IB_PORT, "0x5 0+3x20"),  # steady, then 3 more every minute
            series("node_infiniband_port_errors_received_total", IB_PORT, "7x25"),  # old, flat
        ],
        [
            quiet("9m", "RdmaPortErrorsRising"),
            firing(
                "20m",
                "RdmaPortErrorsRising",
                {**IB_PORT, "counter": short, "severity": "warning"},
                f"RDMA {short} rising on mlx5_0/1 of gpu-03",
                f"30 more {short} in 10 minutes on mlx5_0 port 1. Symbol errors and link "
                "recoveries point at a cable or transceiver; discards and ACK timeouts at "
                "congestion.",
            ),
        ],
    )


def test_flat_rdma_error_counters_stay_quiet(tmp_path):
    promtool_test(
        tmp_path,
        [series("node_infiniband_symbol_error_total", IB_PORT, "41x30")],
        [quiet("25m", "RdmaPortErrorsRising")],
    )


SYS_MANAGER = {"job": "sys-manager", "instance": "198.18.0.3:29103", **NODE}
RESET_DESCRIPTION = (
    "net.ipv4.ip_forward dropped to 0 on gpu-03: bridge-networked exporters stop answering "
    "the master. The node's history on the master says which link gained carrier just "
    "before. Run `sudo mac doctor --fix` on the node."
)
RUNBOOK = "docs/troubleshooting.md#offline-on-the-dashboard-yet-every-service-is-up-ip_forward"


def test_an_ip_forward_reset_alerts_at_once_and_clears_after_fifteen_quiet_minutes(tmp_path):
    resting = {**SYS_MANAGER, "node": "4", "hostname": "gpu-04", "maintenance": "true"}
    promtool_test(
        tmp_path,
        [
            # One reset at 3m (sys-manager's counter 0 -> 1), nothing after.
            series("mac_ipforward_resets_total", SYS_MANAGER, "0 0 0 1x30"),
            series("mac_ipforward_resets_total", resting, "0 0 0 1x30"),
        ],
        [
            quiet("2m", "MacIpForwardReset"),
            firing(
                "3m",
                "MacIpForwardReset",
                {**SYS_MANAGER, "severity": "warning"},
                "IPv4 forwarding was reset on gpu-03",
                RESET_DESCRIPTION,
                runbook_url=RUNBOOK,
            ),
            quiet("19m", "MacIpForwardReset"),
        ],
    )


def test_a_restarted_sys_manager_starting_again_from_zero_is_no_reset(tmp_path):
    promtool_test(
        tmp_path,
        [series("mac_ipforward_resets_total", SYS_MANAGER, "2x5 0x10")],
        [quiet("6m", "MacIpForwardReset"), quiet("12m", "MacIpForwardReset")],
    )
