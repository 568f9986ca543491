"""The GPU verdict on the exporters' pages: one series per GPU, evidence, the boot."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.verdicts import VERDICT_METRICS, HealthAction, HealthState, parse_verdicts
from exporters.gpu_health import WINDOW_SETTING, evidence_window
from exporters.nvidia import NvmlSource, build, generate_dcgm_latest
from exporters.runtime import Exporter, Options
from node.gpu.evidence_state import forget_reset_gpu
from node.gpu.health import UNREACHABLE_GRACE
from node.host import Roots
from testkit.fakes.nvml import two_h200s
from tests.exporters.conftest import FIXTURES

ROOTS = Roots(proc_root=str(FIXTURES / "proc"))


class Wall:
    def __init__(self, now: float = 1_781_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def dcgm(
    nvml,
    wall: Wall,
    window: float = 60.0,
    tick: Wall | None = None,
    kmsg: Path | None = None,
    kept: Path | None = None,
) -> Exporter:
    """The exporter; ``tick``: its monotonic clock, which the evidence windows run on;
    ``kmsg``: the kernel log it reads at its first scrape (none by default); ``kept``: the
    file it keeps its evidence in across restarts (none by default)."""
    source = NvmlSource("gpu-node-17", nvml=nvml, clock=tick or Wall(100.0), roots=ROOTS,
                        window=window, wall=wall, kernel_log=kmsg,
                        evidence_file=kept)  # fmt: skip
    return Exporter("dcgm-exporter", [source], exposition=generate_dcgm_latest)


def verdicts(exporter: Exporter):
    return parse_verdicts(exporter.page(VERDICT_METRICS), "nvidia")


def test_every_gpu_has_one_health_series_labelled_like_dcgm():
    page = dcgm(two_h200s(), Wall()).page(VERDICT_METRICS).decode()
    health = [line for line in page.splitlines() if line.startswith("mac_gpu_health{")]
    assert len(health) == 2
    for label in ("gpu=", "UUID=", "pci_bus_id=", "modelName=", "Hostname=", "serial="):
        assert all(label in line for line in health)
    assert 'serial="1650924060123"' in health[0] and 'state="healthy"' in health[0]


def test_xid_79_on_a_gpu_makes_it_unhealthy_with_a_reboot():
    nvml, wall = two_h200s(), Wall()
    exporter = dcgm(nvml, wall)
    nvml.pending_xids = [(0, 79)]
    gpu0, gpu1 = verdicts(exporter).gpus
    assert (gpu0.state, gpu0.action) == (HealthState.UNHEALTHY, HealthAction.REBOOT)
    assert gpu0.evidence[0].at == wall.now and gpu0.serial == "1650924060123"
    assert gpu1.state is HealthState.HEALTHY


def test_xid_13_asks_the_job_to_restart_and_clears_after_the_window():
    nvml, wall, tick = two_h200s(), Wall(), Wall(100.0)
    exporter = dcgm(nvml, wall, window=60, tick=tick)
    nvml.pending_xids = [(1, 13)]
    gpu1 = verdicts(exporter).gpus[1]
    assert (gpu1.state, gpu1.action) == (HealthState.HEALTHY, HealthAction.RESTART_APP)
    tick.now += 61
    assert verdicts(exporter).gpus[1].evidence == ()


def test_a_gpu_lost_from_the_bus_keeps_its_name_and_needs_a_reboot():
    nvml, wall = two_h200s(), Wall()
    exporter = dcgm(nvml, wall)
    verdicts(exporter)  # seen once: its identity is known
    nvml.gpus[0].lost = True
    gpu0 = verdicts(exporter).gpus[0]
    assert (gpu0.state, gpu0.action, gpu0.uuid) == (
        HealthState.UNHEALTHY, HealthAction.REBOOT, nvml.gpus[0].uuid
    )  # fmt: skip
    assert [e.source for e in gpu0.evidence] == ["lost"]


@pytest.mark.parametrize(
    ("error", "code", "action"),
    [
        ("NVML_ERROR_UNKNOWN", "unreachable", HealthAction.REBOOT),
        ("NVML_ERROR_IRQ_ISSUE", "unreachable", HealthAction.REBOOT),
        ("NVML_ERROR_RESET_REQUIRED", "reset_required", HealthAction.RESET_GPU),
    ],
)
def test_a_gpu_nvml_cannot_reach_is_unhealthy_with_nvmls_words(error, code, action):
    """Many drivers answer a GPU that fell off the bus with an unknown error, not
    GPU_IS_LOST: judged healthy, it was never drained."""
    nvml, wall, tick = two_h200s(), Wall(), Wall(100.0)
    exporter = dcgm(nvml, wall, tick=tick)
    verdicts(exporter)
    nvml.gpus[1].error = getattr(nvml, error)
    if code == "unreachable":  # what a passing hiccup gives too: judged once it lasts
        assert verdicts(exporter).gpus[1].evidence == ()
        wall.now += UNREACHABLE_GRACE
        tick.now += UNREACHABLE_GRACE

    gpu1 = verdicts(exporter).gpus[1]

    assert (gpu1.state, gpu1.action, gpu1.uuid) == (
        HealthState.UNHEALTHY, action, nvml.gpus[1].uuid
    )  # fmt: skip
    assert [(e.source, e.code) for e in gpu1.evidence] == [("lost", code)]
    assert "NVML error" in gpu1.evidence[0].detail or code == "reset_required"
    assert verdicts(exporter).gpus[0].state is HealthState.HEALTHY
    nvml.gpus[1].error = None  # reset: the GPU answers again
    assert verdicts(exporter).gpus[1].state is HealthState.HEALTHY


def test_a_gpu_the_exporter_may_not_open_is_not_judged_unhealthy():
    """Nor healthy: tests/exporters/test_nvidia_trouble.py says what it is."""
    nvml, wall = two_h200s(), Wall()
    exporter = dcgm(nvml, wall)
    nvml.gpus[1].error = nvml.NVML_ERROR_NO_PERMISSION
    assert verdicts(exporter).gpus[1].state is HealthState.DEGRADED


def test_an_xid_from_a_gpu_whose_handle_just_failed_is_its_own():
    nvml, wall = two_h200s(), Wall()
    exporter = dcgm(nvml, wall)
    verdicts(exporter)  # its handle was seen: the XID's device is known
    nvml.gpus[1].error = nvml.NVML_ERROR_UNKNOWN
    nvml.pending_xids = [(1, 79)]

    gpu1 = verdicts(exporter).gpus[1]

    assert ("xid", "79") in [(e.source, e.code) for e in gpu1.evidence]
    page = exporter.page(["DCGM_EXP_XID_ERRORS_COUNT"]).decode()
    assert 'gpu="1"' in page and 'gpu="-1"' not in page


def test_a_gpu_that_refuses_xid_events_leaves_the_others_watched():
    nvml, wall = two_h200s(), Wall()
    registered = []

    def register(handle, types, event_set):
        if handle == 0:
            raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
        registered.append(handle)

    nvml.nvmlDeviceRegisterEvents = register
    exporter = dcgm(nvml, wall)
    nvml.pending_xids = [(1, 79)]

    gpu0, gpu1 = verdicts(exporter).gpus

    assert registered == [1]
    assert gpu1.state is HealthState.UNHEALTHY and gpu0.state is HealthState.HEALTHY


def kernel_log(tmp_path: Path, *lines: str) -> Path:
    """A kernel log in /dev/kmsg's record format (node.gpu.kernel_log)."""
    path = tmp_path / "kmsg"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_an_xid_logged_before_the_exporter_started_is_in_its_first_verdict(tmp_path):
    """An XID 95 a minute before an agent restart: NVML never hands it to the new exporter,
    and the node was never drained for it. The kernel log still has it."""
    nvml, wall, tick = two_h200s(), Wall(), Wall(5000.0)  # 5,000 s since boot
    kmsg = kernel_log(
        tmp_path,
        "6,1,1500000,-;Linux version 6.1.0-28-amd64",
        "4,900,4940000000,-;NVRM: Xid (PCI:0000:3b:00): 95, pid=4242, name=python3, Uncontained",
        " SUBSYSTEM=pci",
    )  # fmt: skip
    exporter = dcgm(nvml, wall, window=3600, tick=tick, kmsg=kmsg)

    gpu0, gpu1 = verdicts(exporter).gpus

    assert gpu0.state is HealthState.HEALTHY
    assert (gpu1.state, gpu1.action) == (HealthState.UNHEALTHY, HealthAction.RESET_GPU)
    assert [(e.source, e.code, e.at) for e in gpu1.evidence] == [("xid", "95", wall.now - 60)]
    # The counters stay dcgm-exporter's, since this exporter started: no restart raises
    # them by a whole boot's XIDs.
    page = exporter.page(["DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_XID_ERRORS"]).decode()
    assert "xid=" not in page and "DCGM_FI_DEV_XID_ERRORS{" in page
    assert 'backend="kernel_log",reason=""} 1.0' in exporter.page().decode()
    tick.now += 3541  # the window, from the XID's own time in the log
    assert verdicts(exporter).gpus[1].evidence == ()


@pytest.mark.parametrize(
    ("xid", "state", "action"),
    [
        ("95, pid=4242, Uncontained", HealthState.HEALTHY, HealthAction.NONE),  # repaired
        # A reset is no repair for an XID that asks for a reboot.
        ("79, pid=0, GPU has fallen off the bus", HealthState.UNHEALTHY, HealthAction.REBOOT),
    ],
)
def test_an_xid_before_the_gpus_reset_is_read_back_only_if_a_reset_does_not_repair_it(
    tmp_path, xid, state, action
):
    """`mac gpu reset` stops the exporter, resets the GPU, logs the reset and starts the
    exporter again: the XID the reset repaired must not drain the node once more."""
    nvml, wall, tick = two_h200s(), Wall(), Wall(5000.0)
    kmsg = kernel_log(
        tmp_path,
        f"4,900,4900000000,-;NVRM: Xid (PCI:0000:3b:00): {xid}",
        "13,901,4950000000,-;mac: GPU reset PCI:0000:3b:00 (nvidia-smi -r -i 1)",
    )  # fmt: skip
    gpu1 = verdicts(dcgm(nvml, wall, window=3600, tick=tick, kmsg=kmsg)).gpus[1]
    assert (gpu1.state, gpu1.action) == (state, action)


def test_a_record_the_kernels_clock_dates_a_little_ahead_is_dated_now(tmp_path):
    """The log's clock is the kernel's, a hair off the monotonic one."""
    nvml, wall, tick = two_h200s(), Wall(), Wall(5000.0)
    kmsg = kernel_log(tmp_path, "4,900,5002000000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=0")
    gpu1 = verdicts(dcgm(nvml, wall, window=3600, tick=tick, kmsg=kmsg)).gpus[1]
    assert [(e.code, e.at) for e in gpu1.evidence] == [("48", wall.now)]


def test_an_xid_logged_longer_ago_than_the_window_is_no_evidence(tmp_path):
    nvml, wall, tick = two_h200s(), Wall(), Wall(5000.0)
    kmsg = kernel_log(tmp_path, "4,900,1000000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0")
    assert verdicts(dcgm(nvml, wall, window=3600, tick=tick, kmsg=kmsg)).gpus[1].evidence == ()


def test_a_logged_xid_waits_for_its_gpu_to_be_listed(tmp_path):
    """GPU 1 gives no handle at the first scrape: its PCI address is not known yet."""
    nvml, wall, tick = two_h200s(), Wall(), Wall(5000.0)
    nvml.gpus[1].error = nvml.NVML_ERROR_NO_PERMISSION
    kmsg = kernel_log(tmp_path, "4,900,4990000000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=0")
    exporter = dcgm(nvml, wall, window=3600, tick=tick, kmsg=kmsg)
    assert [e.code for e in verdicts(exporter).gpus[1].evidence] == ["no_access"]
    kmsg.unlink()  # read once: the exporter keeps what it found
    nvml.gpus[1].error = None

    assert ("xid", "48") in [(e.source, e.code) for e in verdicts(exporter).gpus[1].evidence]


def test_a_kernel_log_the_exporter_may_not_read_says_so_and_judges_on(tmp_path):
    nvml, wall = two_h200s(), Wall()
    exporter = dcgm(nvml, wall, kmsg=tmp_path / "no-kmsg")

    assert verdicts(exporter).gpus[0].state is HealthState.HEALTHY
    page = exporter.page().decode()
    line = next(x for x in page.splitlines() if 'backend="kernel_log"' in x)
    assert line.endswith(" 0.0") and "not in the verdict" in line and "CAP_SYSLOG" in line


def test_the_exporter_reads_the_hosts_kernel_log_under_its_dev_root(tmp_path):
    roots = Roots(rootfs=str(tmp_path), proc_root=ROOTS.proc_root, dev_root=str(tmp_path))
    exporter = build(Options(hostname="gpu-node-17", roots=roots))
    (source,) = [each for each in exporter.runner.sources if isinstance(each, NvmlSource)]
    assert source._kernel_log == tmp_path / "kmsg"


# --- across a restart of the exporter ----------------------------------------------


def restarted(tmp_path: Path, nvml, wall: Wall, tick: Wall, kmsg: Path | None = None):
    """The exporter, started again over the state folder of the one before (a minute on)."""
    wall.now += 60
    tick.now += 60
    kept = tmp_path / "gpu-evidence-dcgm-exporter.json"
    return dcgm(nvml, wall, window=3600, tick=tick, kmsg=kmsg, kept=kept)


def test_an_ecc_verdict_outlives_a_restart_of_the_exporter(tmp_path):
    nvml, wall, tick = two_h200s(), Wall(), Wall(5000.0)
    kept = tmp_path / "gpu-evidence-dcgm-exporter.json"
    before = dcgm(nvml, wall, window=3600, tick=tick, kept=kept)
    verdicts(before)
    nvml.gpus[0].ecc_dbe = 2
    seen = verdicts(before).gpus[0]
    assert (seen.state, seen.action) == (HealthState.UNHEALTHY, HealthAction.RESET_GPU)
    before.close()

    after = restarted(tmp_path, nvml, wall, tick)

    assert verdicts(after).gpus[0] == seen  # the same evidence, seen at the same time
    assert 'backend="evidence_state",reason=""} 1.0' in after.page().decode()
    tick.now += 3600
    assert verdicts(after).gpus[0].evidence == ()


def test_errors_counted_while_the_exporter_was_down_are_judged_when_it_is_back(tmp_path):
    nvml, wall, tick = two_h200s(), Wall(), Wall(5000.0)
    kept = tmp_path / "gpu-evidence-dcgm-exporter.json"
    verdicts(dcgm(nvml, wall, window=3600, tick=tick, kept=kept))
    nvml.gpus[1].ecc_dbe = 1  # while no exporter ran

    gpu1 = verdicts(restarted(tmp_path, nvml, wall, tick)).gpus[1]

    assert [(e.source, e.code, e.at) for e in gpu1.evidence] == [("ecc", "uncorrectable", wall.now)]


def test_a_gpu_reset_while_the_exporter_was_down_repairs_its_kept_evidence_and_xids(tmp_path):
    """`mac gpu reset` stops the exporter, resets the GPU, logs the reset, drops what the
    state file keeps of that GPU (forget_reset_gpu) and starts it again: neither the XID
    nor the ECC rise of before the reset comes back, and the other GPU keeps its own."""
    nvml, wall, tick = two_h200s(), Wall(), Wall(5000.0)
    kmsg = kernel_log(tmp_path, "4,900,4990000000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=0")
    kept = tmp_path / "gpu-evidence-dcgm-exporter.json"
    before = dcgm(nvml, wall, window=3600, tick=tick, kmsg=kmsg, kept=kept)
    verdicts(before)
    nvml.gpus[0].ecc_dbe = nvml.gpus[1].ecc_dbe = 2
    assert {e.source for e in verdicts(before).gpus[1].evidence} == {"xid", "ecc"}
    before.close()
    nvml.gpus[1].ecc_dbe = 0  # a reset starts the volatile counts again
    with kmsg.open("a") as log:
        log.write("13,901,5030000000,-;mac: GPU reset PCI:0000:3b:00 (nvidia-smi -r -i 1)\n")
    changed, problems = forget_reset_gpu(tmp_path, 1, nvml.gpus[1].uuid)
    assert (changed, problems) == ([str(kept)], [])

    gpu0, gpu1 = verdicts(restarted(tmp_path, nvml, wall, tick, kmsg=kmsg)).gpus

    assert gpu1.evidence == ()
    assert [(e.source, e.code) for e in gpu0.evidence] == [("ecc", "uncorrectable")]


def test_a_state_file_the_exporter_cannot_use_says_so_and_judging_goes_on(tmp_path):
    nvml, wall, tick = two_h200s(), Wall(), Wall(5000.0)
    kept = tmp_path / "gpu-evidence-dcgm-exporter.json"
    kept.write_text('{"version": 1, "gpus"')
    exporter = dcgm(nvml, wall, window=3600, tick=tick, kept=kept)
    verdicts(exporter)
    nvml.gpus[0].ecc_dbe = 1

    assert verdicts(exporter).gpus[0].state is HealthState.UNHEALTHY
    page = exporter.page().decode()
    line = next(x for x in page.splitlines() if 'backend="evidence_state"' in x)
    assert line.endswith(" 0.0") and "is not a GPU evidence file MAC reads" in line


def test_without_a_state_folder_nothing_is_kept_nor_reported(tmp_path):
    exporter = dcgm(two_h200s(), Wall())
    assert "evidence_state" not in exporter.page().decode()


def test_the_exporter_keeps_its_evidence_in_the_state_folder_it_is_given(tmp_path):
    exporter = build(Options(hostname="gpu-node-17", roots=ROOTS, state_dir=tmp_path))
    (source,) = [each for each in exporter.runner.sources if isinstance(each, NvmlSource)]
    assert source._evidence.path == tmp_path / "gpu-evidence-dcgm-exporter.json"


def test_a_driver_that_stops_answering_leaves_every_gpu_unhealthy_and_says_why():
    nvml, wall, tick = two_h200s(), Wall(), Wall(100.0)
    exporter = dcgm(nvml, wall, tick=tick)
    verdicts(exporter)
    nvml.system_error = nvml.NVML_ERROR_UNKNOWN
    verdicts(exporter)
    wall.now += UNREACHABLE_GRACE
    tick.now += UNREACHABLE_GRACE

    judged = verdicts(exporter)

    assert [g.state for g in judged.gpus] == [HealthState.UNHEALTHY] * 2
    assert all(g.evidence[0].code == "unreachable" for g in judged.gpus)
    page = exporter.page(["mac_exporter_backend_available", "mac_gpu_lost"]).decode()
    assert 'backend="nvml"' in page and "NVML stopped answering" in page
    assert page.count("mac_gpu_lost{") == 2 and "mac_gpu_lost{" in page
    nvml.system_error = None
    assert [g.state for g in verdicts(exporter).gpus] == [HealthState.HEALTHY] * 2


def test_the_hpc_job_label_repeats_dcgm_series_but_never_the_verdict(tmp_path):
    """A GPU shared by two jobs: its DCGM series once per job, as NVIDIA's exporter; its
    verdict once, as the contract says, with the same bytes whatever the jobs."""
    (tmp_path / "0").write_text("1001\n1002\n")
    source = NvmlSource("gpu-node-17", nvml=two_h200s(), roots=ROOTS, wall=Wall(),
                        hpc_job_dir=tmp_path)  # fmt: skip
    exporter = Exporter("dcgm-exporter", [source], exposition=generate_dcgm_latest)

    page = exporter.page(["DCGM_FI_DEV_GPU_TEMP", *VERDICT_METRICS]).decode()

    temps = [line for line in page.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert sorted(line.split('hpc_job="')[1][:4] for line in temps if 'gpu="0"' in line) == [
        "1001", "1002"
    ]  # fmt: skip
    health = [line for line in page.splitlines() if line.startswith("mac_gpu_health{")]
    assert len(health) == 2 and not any("hpc_job" in line for line in health)
    before = exporter.page(VERDICT_METRICS)
    (tmp_path / "0").write_text("1003\n")
    assert exporter.page(VERDICT_METRICS) == before


def test_the_job_mapping_folder_is_a_host_path_read_under_the_exporters_rootfs(tmp_path):
    """Under Docker the exporter sees the host's / at --rootfs (/host/root)."""
    folder = tmp_path / "run" / "mac" / "hpc-jobs"
    folder.mkdir(parents=True)
    (folder / "1").write_text("2002\n")
    roots = Roots(proc_root=ROOTS.proc_root, rootfs=str(tmp_path))
    source = NvmlSource("gpu-node-17", nvml=two_h200s(), roots=roots, wall=Wall(),
                        hpc_job_dir=Path("/run/mac/hpc-jobs"))  # fmt: skip
    exporter = Exporter("dcgm-exporter", [source], exposition=generate_dcgm_latest)

    page = exporter.page(["DCGM_FI_DEV_GPU_TEMP"]).decode()

    assert 'hpc_job="2002"' in page and page.count("hpc_job=") == 1


def test_the_prologs_files_by_slurms_index_label_the_gpu_slurm_means(tmp_path):
    """Slurm's GPU 0 is the first device file (/dev/nvidia0); NVML numbers by PCI bus, and
    here NVML's GPU 0 is /dev/nvidia1: the job on Slurm's 0 is on NVML's GPU 1."""
    nvml = two_h200s()
    nvml.gpus[0].minor, nvml.gpus[1].minor = 1, 0
    (tmp_path / "0").write_text("3003\n")
    source = NvmlSource("gpu-node-17", nvml=nvml, roots=ROOTS, wall=Wall(), hpc_job_dir=tmp_path)
    exporter = Exporter("dcgm-exporter", [source], exposition=generate_dcgm_latest)

    page = exporter.page(["DCGM_FI_DEV_GPU_TEMP"]).decode()

    (labelled,) = [line for line in page.splitlines() if "hpc_job=" in line]
    assert 'gpu="1"' in labelled and 'device="nvidia0"' in labelled


def test_nvml_fields_feed_the_verdict():
    nvml, wall = two_h200s(), Wall()
    exporter = dcgm(nvml, wall)
    verdicts(exporter)
    nvml.gpus[0].recovery_action = 2  # NODE_REBOOT
    nvml.gpus[0].remapped_rows = (1, 0, 1, 0)  # a remap pending
    nvml.gpus[0].throttle = 0x40  # hardware thermal slowdown
    nvml.gpus[0].ecc_dbe = 3
    sources = {e.source: (e.state, e.action) for e in verdicts(exporter).gpus[0].evidence}
    assert sources == {
        "recovery_action": (HealthState.UNHEALTHY, HealthAction.REBOOT),
        "row_remap": (HealthState.DEGRADED, HealthAction.RESET_GPU),
        "throttle": (HealthState.DEGRADED, HealthAction.NONE),
        "ecc": (HealthState.UNHEALTHY, HealthAction.RESET_GPU),
    }


def test_without_nvml_there_is_no_verdict():
    nvml = two_h200s()
    nvml.init_error = nvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert verdicts(dcgm(nvml, Wall())) is None


def test_the_window_comes_from_the_nodes_settings(monkeypatch):
    monkeypatch.setenv(WINDOW_SETTING, "30")
    assert evidence_window(Options(roots=ROOTS)) == 30.0
    monkeypatch.setenv(WINDOW_SETTING, "soon")
    assert evidence_window(Options(roots=ROOTS)) == 3600.0


@pytest.mark.parametrize("names", [("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",)])
def test_the_name_filter_keeps_dcgm_counters_exact(names):
    page = dcgm(two_h200s(), Wall()).page(names).decode()
    assert "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter" in page
    assert "mac_gpu_health" not in page and "DCGM_FI_DEV_GPU_TEMP" not in page
