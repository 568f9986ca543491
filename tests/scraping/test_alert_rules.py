"""MAC's alert rules (scraping/prometheus/alerts.yml) under promtool: valid, and each fires.

Every alert has a `promtool test rules` case built from input series the way the
master's /metrics, Prometheus' ``up``, dcgm-exporter and node_exporter/nic-exporter
write them, with the alert expected (labels and text) when it should fire and
absent when it should not.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from alerting import nodealerts
from scraping.promconfig import ALERT_RULES

TROUBLESHOOTING = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"

pytestmark = pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool (Debian's prometheus package) is not installed"
)

NODE = {"node": "3", "hostname": "gpu-03", "cluster_name": "mac", "maintenance": "false"}
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
    # JSON's string escapes (\n, \", \\) are PromQL's too.
    inner = ",".join(f"{key}={json.dumps(value)}" for key, value in labels.items())
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


RULES = yaml.safe_load(ALERT_RULES.read_text())
RUNBOOKS = {
    rule["alert"]: rule["annotations"]["runbook_url"]
    for group in RULES["groups"]
    for rule in group["rules"]
}


def firing(at: str, name: str, labels: dict, summary: str, description: str, **more: str) -> dict:
    annotations = {
        "summary": summary,
        "description": description,
        "runbook_url": RUNBOOKS[name],
        **more,
    }
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}],
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
    assert "SUCCESS: 14 rules found" in run.stdout


def test_the_masters_prometheus_config_loads_the_rules(tmp_path):
    out = tmp_path / "prometheus.yml"
    call_command("prometheus_config", "--out", str(out), "--sd-dir", str(tmp_path / "targets"))
    assert yaml.safe_load(out.read_text())["rule_files"] == [str(ALERT_RULES)]
    run = subprocess.run(
        ["promtool", "check", "config", str(out)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 14 rules found" in run.stdout


def test_the_offline_backstop_fires_with_exactly_the_labels_the_master_posts(tmp_path):
    up = {**MASTER, **NODE, "gpu_vendor": "nvidia"}
    resting = {**MASTER, "node": "4", "hostname": "gpu-04", "maintenance": "true",
               "gpu_vendor": "amd"}  # fmt: skip
    node = NODE["node"]
    first, second = "2026-12-05T10:01:00Z", "2026-12-05T10:04:00Z"
    # The master's own post (alerting.nodealerts) has these labels: one fingerprint in
    # Alertmanager; offline() expects the same.
    posted = nodealerts.labels(int(node), NODE["hostname"], first)
    assert posted["cluster_name"] == NODE["cluster_name"]
    # Online, Offline for 2 minutes, Online, Offline again: mac_node_up as the master's
    # /metrics writes it, one series while Online and one per incident (a series the
    # master stops writing goes stale at the next scrape).
    promtool_test(
        tmp_path,
        [
            series("up", MASTER, "1x5"),
            series("mac_node_up", up, "1 stale _ 1 stale _"),
            series("mac_node_up", {**up, "down_since": first}, "_ 0 0 stale _ _"),
            series("mac_node_up", {**up, "down_since": second}, "_ _ _ _ 0 0"),
            series("mac_node_up", {**resting, "down_since": first}, "0 0 0 0 0 0"),
        ],
        [
            quiet("1m", "MacNodeOffline"),  # pending: the master's own post came first
            offline("2m", (int(node), NODE["hostname"], first)),
            quiet("3m", "MacNodeOffline"),
            # The second incident is another alert, so the first's resolved one, which
            # Prometheus re-sends, cannot end it in Alertmanager.
            offline("5m", (int(node), NODE["hostname"], second)),
        ],
    )


def offline(at: str, *nodes: tuple[int, str, str]) -> dict:
    """The backstop's MacNodeOffline firing at `at` for (node, hostname, down_since)s."""
    words = (
        "The master's probe of sys-exporter (:29101) on {host} fails. The node's page on "
        "the master says why and how to fix it; `mac doctor` on the node checks the rest."
    )
    alerts = []
    for node, host, since in nodes:
        labels = nodealerts.labels(node, host, since)
        del labels["alertname"]
        annotations = {
            "summary": f"Node {host} is offline",
            "description": words.format(host=host),
            "runbook_url": RUNBOOKS["MacNodeOffline"],
            "source": "prometheus-backstop",
        }
        alerts.append({"exp_labels": labels, "exp_annotations": annotations})
    return {"eval_time": at, "alertname": "MacNodeOffline", "exp_alerts": alerts}


def test_the_backstop_holds_its_alerts_while_the_master_cannot_be_scraped(tmp_path):
    since = "2026-12-05T10:00:00Z"
    up = {**MASTER, **NODE, "gpu_vendor": "nvidia"}
    other = {**up, "node": "5", "hostname": "gpu-05"}
    # gpu-03 is Offline from 0m and fires at 1m. One scrape of the master's /metrics
    # fails at 2m (what it wrote goes stale); gpu-03 is still down at 3m and back at
    # 5m. gpu-05 was only pending when the scrape failed: a pending alert is not held.
    held = (3, "gpu-03", since)
    promtool_test(
        tmp_path,
        [
            series("up", MASTER, "1 1 0 1 1 1"),
            series("mac_node_up", {**up, "down_since": since}, "0 0 stale 0 0 stale"),
            series("mac_node_up", up, "_ _ _ _ _ 1"),
            series("mac_node_up", {**other, "down_since": "10:01"}, "_ 0 stale _ _ _"),
            series("mac_node_up", other, "_ _ _ 1 1 1"),
        ],
        [
            offline("1m", held),
            offline("2m", held),  # the failed scrape: no false "resolved"
            offline("3m", held),  # scraped again: the same alert, not a new one pending
            offline("4m", held),
            quiet("5m", "MacNodeOffline"),  # back Online: ended at the first scrape
        ],
    )


@pytest.mark.parametrize(
    ("master_up", "node_up", "heartbeat", "held_until", "ended_at"),
    [
        # The master unreachable from 2m: held while it answered within 2 minutes, then
        # resolved as before the hold existed, when MacMasterDown (for: 2m) pages.
        ("1 1 0 0 0 0", "0 0 stale _ _ _", None, "2m", "4m"),
        # Deregistered while the master could not be scraped: the first scrape that
        # answers no longer lists the node, and the held alert ends there.
        ("1 1 0 1 1", "0 0 stale _ _", None, "2m", "3m"),
        # A configuration without the mac-master job has no `up` of it: an alert whose
        # series ends is resolved as before, not held for ever.
        (None, "0 0 stale _ _", None, "1m", "2m"),
        # Only the API down: the worker's sweep finds the node back and puts its
        # sys-exporter back in the targets; scraped at 3m, the held alert ends there
        # (held on, it would re-open the alert the worker's post ended).
        ("1 1 0 0 0 0", "0 0 stale _ _ _", "_ _ _ 1 1 1", "2m", "3m"),
    ],
    ids=["master-down-past-2m", "deregistered-meanwhile", "master-not-scraped", "back-meanwhile"],
)
def test_a_held_alert_ends(tmp_path, master_up, node_up, heartbeat, held_until, ended_at):
    since = "2026-12-05T10:00:00Z"
    down = {**MASTER, **NODE, "gpu_vendor": "nvidia", "down_since": since}
    inputs = [series("mac_node_up", down, node_up)]
    if master_up is not None:
        inputs.append(series("up", MASTER, master_up))
    if heartbeat is not None:
        target = {"job": "sys-exporter", "instance": "198.18.0.3:29101", **NODE}
        inputs.append(series("up", target, heartbeat))
    promtool_test(
        tmp_path,
        inputs,
        [offline(held_until, (3, "gpu-03", since)), quiet(ended_at, "MacNodeOffline")],
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


def test_a_scraper_that_is_down_is_no_exporter_alert(tmp_path):
    """Scale-out mode: the store scrapes its scrapers (job mac-scraper, no node label);
    MacScraperDown (scaleout.yml) pages for a dead one, MacExporterDown does not."""
    scraper = {"job": "mac-scraper", "instance": "127.0.0.1:29431", "shard": "1/2"}
    promtool_test(
        tmp_path,
        [series("up", scraper, "0 0 0 0 0"), series("up", DCGM, "1 1 1 1 1")],
        [quiet("3m", "MacExporterDown"), quiet("4m", "MacExporterDown")],
    )


XID_SUMMARY = "GPU 1 on gpu-03 reported an XID error"
XID_DESCRIPTION = (
    "GPU 1 (GPU-a1b2c3d4, 00000000:3B:00.0) reported an XID that needs a look; "
    "DCGM_FI_DEV_XID_ERRORS holds the last one. The node's page on the master shows the "
    "GPU's verdict, its evidence and the action (NVIDIA's XID catalog)."
)


def test_a_new_xid_alerts_and_a_repeated_one_too(tmp_path):
    promtool_test(
        tmp_path,
        [
            # XID 48 at 2m, then again at 15m (the gauge stays 48, the count rises).
            series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 0 48x20"),
            series("DCGM_EXP_XID_ERRORS_COUNT", {**GPU, "xid": "48"}, "_ _ 1x12 2x8"),
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


@pytest.mark.parametrize("xid", ["13", "31", "43", "45"])
def test_an_applications_own_xid_is_no_alert(tmp_path, xid):
    promtool_test(
        tmp_path,
        [
            series("DCGM_FI_DEV_XID_ERRORS", GPU, f"0 0 {xid}x20"),
            series("DCGM_EXP_XID_ERRORS_COUNT", {**GPU, "xid": xid}, "_ _ 1x12 2x8"),
        ],
        [quiet(at, "GpuXidError") for at in ("2m", "3m", "15m")],
    )


def test_an_exporter_without_the_per_xid_count_alerts_on_its_last_xid_alone(tmp_path):
    promtool_test(
        tmp_path,
        [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 0 79x20")],
        [firing("2m", "GpuXidError", {**GPU, "severity": "warning"}, XID_SUMMARY, XID_DESCRIPTION)],
    )


def test_the_rule_ignores_exactly_the_xids_the_catalog_judges_healthy():
    from node.gpu.xid_catalog import ignorable_xids

    rule = next(r for g in RULES["groups"] for r in g["rules"] if r.get("alert") == "GpuXidError")
    ignored = re.search(r'xid!~"([0-9|]+)"', rule["expr"]).group(1)
    filtered = [int(code) for code in re.findall(r"!= ([0-9]+)", rule["expr"]) if code != "0"]
    stale = "alerts.yml's GpuXidError is stale: put node.gpu.xid_catalog.ignorable_xids() in it"
    assert [int(code) for code in ignored.split("|")] == ignorable_xids(), stale
    assert filtered == ignorable_xids(), stale


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


def _anchor(heading: str) -> str:
    """The anchor GitHub (and most Markdown renderers) give a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_rule_has_a_severity_a_summary_and_a_runbook_section_that_exists():
    anchors = {
        _anchor(line.lstrip("#"))
        for line in TROUBLESHOOTING.read_text().splitlines()
        if line.startswith("## ")
    }
    for group in RULES["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]
            path, _, anchor = rule["annotations"]["runbook_url"].partition("#")
            assert path == "docs/troubleshooting.md", rule["alert"]
            assert anchor in anchors, f"{rule['alert']}: no section #{anchor}"


def test_the_master_down_has_its_own_alert_not_an_exporter_one(tmp_path):
    promtool_test(
        tmp_path,
        [series("up", MASTER, "1 0 0 0 0")],
        [
            quiet("3m", "MacExporterDown"),
            firing(
                "3m",
                "MacMasterDown",
                {**MASTER, "severity": "critical"},
                "The MAC master's API at 127.0.0.1:28080 does not answer",
                "Prometheus cannot scrape the master's /metrics: mac-api-server is down or "
                "overloaded, so node status stops reaching alerts and the dashboard. Run "
                "`mac status master` on the master.",
            ),
        ],
    )


def test_sweeps_that_stop_for_three_intervals_alert(tmp_path):
    # The last sweep finished at t=60 s; at 30 s intervals three are missed by 150 s,
    # and after one more minute (for: 1m) the alert fires.
    promtool_test(
        tmp_path,
        [
            series("mac_sweep_last_timestamp_seconds", MASTER, "0 60 60 60 60 60"),
            series("mac_probe_interval_seconds", MASTER, "30x5"),
        ],
        [
            quiet("2m", "MacSweepsStalled"),
            firing(
                "4m",
                "MacSweepsStalled",
                {**MASTER, "severity": "critical"},
                "The MAC master has not swept the fleet for 3m 0s",
                "No fleet sweep finished for over three probe intervals: mac-worker or "
                "mac-beat is down or stuck, and no node's status is current. Run `mac status "
                "master` and `mac logs worker`.",
            ),
        ],
    )


def test_targets_that_cannot_be_written_alert(tmp_path):
    promtool_test(
        tmp_path,
        [series("mac_sweep_targets_written", MASTER, "1 0 0 0 1")],
        [
            quiet("2m", "MacTargetsUnwritable"),  # pending
            firing(
                "3m",
                "MacTargetsUnwritable",
                {**MASTER, "severity": "critical"},
                "The MAC master cannot write Prometheus' targets files",
                "The sweep runs but cannot replace the file-SD targets (a full or read-only "
                "disk): Prometheus keeps scraping the old set, so new or recovered nodes are "
                "not scraped. `curl http://localhost:28080/health` names the folder and the "
                "error.",
            ),
            quiet("4m", "MacTargetsUnwritable"),
        ],
    )


ECC_DESCRIPTION = (
    "{n} more uncorrectable (double-bit) ECC errors in 10 minutes: jobs on this GPU may get "
    "corrupt data or crash. Drain the node; the GPU needs a reset (and a row remap, or a "
    "replacement if it repeats)."
)
AMD_GPU = {"job": "rocm-exporter", "instance": "198.18.0.4:29200", **NODE, "gpu_id": "2",
           "hostname": "mi-04", "node": "4"}  # fmt: skip


def test_uncorrectable_ecc_errors_rising_alert_on_nvidia_and_amd(tmp_path):
    promtool_test(
        tmp_path,
        [
            series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "0x5 2x10"),
            series("gpu_ecc_uncorrect_total", AMD_GPU, "1x5 4x10"),
            series("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", GPU, "0+50x15"),  # corrected: no alert
        ],
        [
            quiet("4m", "GpuEccUncorrectableErrors"),
            {
                "eval_time": "8m",
                "alertname": "GpuEccUncorrectableErrors",
                "exp_alerts": [
                    {
                        "exp_labels": {**GPU, "severity": "critical"},
                        "exp_annotations": {
                            "summary": "Uncorrectable ECC errors rising on GPU 1 of gpu-03",
                            "description": ECC_DESCRIPTION.format(n=2),
                            "runbook_url": RUNBOOKS["GpuEccUncorrectableErrors"],
                        },
                    },
                    {
                        "exp_labels": {**AMD_GPU, "severity": "critical"},
                        "exp_annotations": {
                            "summary": "Uncorrectable ECC errors rising on GPU 2 of mi-04",
                            "description": ECC_DESCRIPTION.format(n=3),
                            "runbook_url": RUNBOOKS["GpuEccUncorrectableErrors"],
                        },
                    },
                ],
            },
            quiet("20m", "GpuEccUncorrectableErrors"),  # no new error for 10 minutes
        ],
    )


def test_a_gpu_hot_for_five_minutes_alerts_and_a_warm_one_does_not(tmp_path):
    promtool_test(
        tmp_path,
        [
            series("DCGM_FI_DEV_GPU_TEMP", GPU, "70 86x10"),
            series("DCGM_FI_DEV_GPU_TEMP", {**GPU, "gpu": "2", "UUID": "GPU-e5f6"}, "80x10"),
        ],
        [
            quiet("5m", "GpuTemperatureHigh"),
            firing(
                "6m",
                "GpuTemperatureHigh",
                {**GPU, "severity": "warning"},
                "GPU 1 on gpu-03 is at 86 C, near its limit",
                "The GPU has been this hot for 5 minutes; a few degrees more and it slows its "
                "clocks (thermal slowdown). Check the node's fans and inlet temperature (the "
                "BMC charts), and the airflow of the rack.",
            ),
        ],
    )


HOST = {"job": "sys-exporter", "instance": "198.18.0.3:29101", **NODE}
ROOT_FS = {**HOST, "device": "/dev/nvme0n1p2", "fstype": "ext4", "mountpoint": "/"}


def test_a_filesystem_almost_full_alerts_but_not_a_tmpfs_or_a_read_only_one(tmp_path):
    tmpfs = {**ROOT_FS, "device": "tmpfs", "fstype": "tmpfs", "mountpoint": "/run"}
    iso = {**ROOT_FS, "device": "/dev/sr0", "fstype": "iso9660", "mountpoint": "/media"}
    promtool_test(
        tmp_path,
        [
            series("node_filesystem_avail_bytes", ROOT_FS, "50 5x15"),
            series("node_filesystem_size_bytes", ROOT_FS, "100x15"),
            series("node_filesystem_readonly", ROOT_FS, "0x15"),
            series("node_filesystem_avail_bytes", tmpfs, "1x15"),
            series("node_filesystem_size_bytes", tmpfs, "100x15"),
            series("node_filesystem_readonly", tmpfs, "0x15"),
            series("node_filesystem_avail_bytes", iso, "0x15"),
            series("node_filesystem_size_bytes", iso, "100x15"),
            series("node_filesystem_readonly", iso, "1x15"),
        ],
        [
            quiet("10m", "NodeFilesystemAlmostFull"),
            firing(
                "11m",
                "NodeFilesystemAlmostFull",
                {**ROOT_FS, "severity": "warning"},
                "/ on gpu-03 has 5% free",
                "Less than 10 % of / (/dev/nvme0n1p2) is free. Container images, logs and "
                "checkpoints fill it; a full root or Docker disk stops the agent's containers.",
            ),
        ],
    )


def test_memory_pressure_for_ten_minutes_alerts(tmp_path):
    promtool_test(
        tmp_path,
        [
            series("node_memory_MemAvailable_bytes", HOST, "400 30x15"),
            series("node_memory_MemTotal_bytes", HOST, "1000x15"),
        ],
        [
            quiet("10m", "NodeMemoryPressure"),
            firing(
                "11m",
                "NodeMemoryPressure",
                {**HOST, "severity": "warning"},
                "gpu-03 has 3% of its memory available",
                "Under 5 % of memory has been available for 10 minutes: the kernel's OOM "
                "killer is next, and it may pick a job or an exporter.",
            ),
        ],
    )


SYS_MANAGER = {"job": "sys-manager", "instance": "198.18.0.3:29103", **NODE}
RESET_DESCRIPTION = (
    "net.ipv4.ip_forward dropped to 0 on gpu-03: bridge-networked exporters stop answering "
    "the master. The node's history on the master says which link gained carrier just "
    "before. Run `sudo mac doctor --fix` on the node."
)


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
