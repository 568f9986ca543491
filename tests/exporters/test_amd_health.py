"""rocm-exporter's verdicts across scrapes: a GPU that stops answering, a RAS block that
misses a read, and a scrape where amdsmi fails and sysfs answers in its place."""

from __future__ import annotations

import shutil
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from contract.verdicts import HealthAction, HealthState, parse_verdicts
from exporters.amd import AmdGpuSource, build
from exporters.runtime import Exporter, Options
from node.gpu.health import UNREACHABLE_GRACE
from node.host import Roots
from testkit.fakes.amdsmi import FakeAmdSmi, ras_counts
from tests.exporters.test_amd import AMD_ROOTS, GPU0, GPU1, SMI0

UMC = FakeAmdSmi.AmdSmiGpuBlock.UMC
SMI1 = {
    **SMI0,
    "gpu_id": "1",
    "gpu_uuid": "5fff74a1-0000-1000-80c3-2b1c0e9a7f3e",
    "serial_number": "0x2B1C0E9A7F3D5001",
}


class Wall:
    def __init__(self) -> None:
        self.now = 1_781_000_000.0

    def __call__(self) -> float:
        return self.now


class Scrape:
    """One scrape of the exporter: its samples, and the verdicts as the master reads them."""

    def __init__(self, exporter: Exporter) -> None:
        page = exporter.page()
        self.verdicts = parse_verdicts(page, "amd")
        self.samples = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(page.decode())
            for sample in family.samples
        }

    def value(self, name: str, labels: dict[str, str]) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def evidence(self, index: int) -> list[tuple[str, str]]:
        return [(e.source, e.code) for e in self.verdicts.gpus[index].evidence]


def rocm(
    amdsmi, roots: Roots = AMD_ROOTS, wall: Wall | None = None, kept: Path | None = None
) -> Exporter:
    """The exporter; ``kept``: the file it keeps its evidence in across restarts."""
    wall = wall or Wall()
    source = AmdGpuSource(roots, amdsmi=amdsmi, wall=wall, clock=wall,  # windows on it too
                          evidence_file=kept)  # fmt: skip
    return Exporter("rocm-exporter", [source])


def lasting(exporter: Exporter, wall: Wall) -> Scrape:
    """A scrape once a GPU that stopped answering has been silent for UNREACHABLE_GRACE:
    before that, one failed scrape (amdsmi busy for a moment) is no verdict."""
    first = Scrape(exporter)
    assert all(e.code != "unreadable" for gpu in first.verdicts.gpus for e in gpu.evidence)
    wall.now += UNREACHABLE_GRACE
    return Scrape(exporter)


# --- a GPU that stops answering ----------------------------------------------------


def test_a_gpu_that_stops_answering_is_unreadable_so_unhealthy():
    amdsmi, wall = FakeAmdSmi(count=2), Wall()
    exporter = rocm(amdsmi, wall=wall)
    assert Scrape(exporter).value("gpu_health", SMI1) == 1
    amdsmi.silent = {1}  # every reading fails; amdsmi still names it

    now = lasting(exporter, wall)

    assert now.value("gpu_health", SMI1) == 0  # AMD's own flag, at once
    gpu0, gpu1 = now.verdicts.gpus
    assert (gpu1.state, gpu1.action) == (HealthState.UNHEALTHY, HealthAction.REBOOT)
    assert now.evidence(1) == [("lost", "unreadable")]
    assert gpu0.state is HealthState.HEALTHY
    amdsmi.silent = set()  # it answers again: the condition clears
    assert Scrape(exporter).verdicts.gpus[1].state is HealthState.HEALTHY


def test_an_unreadable_gpu_keeps_the_name_it_had_when_it_last_answered():
    amdsmi, wall = FakeAmdSmi(count=2), Wall()
    exporter = rocm(amdsmi, wall=wall)
    Scrape(exporter)

    def fails(*args):
        raise amdsmi.AmdSmiException("AMDSMI_STATUS_DRM_ERROR - DRM error")

    amdsmi.silent = {1}
    amdsmi.amdsmi_get_gpu_device_uuid = amdsmi.amdsmi_get_gpu_asic_info = fails

    now = lasting(exporter, wall)

    assert now.value("gpu_health", SMI1) == 0  # under the labels it had, not blank ones
    gpu1 = now.verdicts.gpus[1]
    assert (gpu1.uuid, gpu1.serial) == (SMI1["gpu_uuid"], SMI1["serial_number"])
    assert gpu1.state is HealthState.UNHEALTHY


def test_a_gpu_that_never_answered_is_not_judged_unreadable():
    """As AMD's exporter, which marks unhealthy only the GPUs it had: one that never
    answered since the exporter started is unsupported, not broken."""
    amdsmi = FakeAmdSmi(count=2)
    amdsmi.silent = {1}
    exporter = rocm(amdsmi)
    Scrape(exporter)

    now = Scrape(exporter)

    assert now.value("gpu_health", SMI1) == 1
    assert now.verdicts.gpus[1].state is HealthState.HEALTHY


def test_a_sysfs_card_whose_readings_fail_is_unreadable(tmp_path):
    shutil.copytree(AMD_ROOTS.sys_root, tmp_path / "sys", symlinks=True)
    roots = Roots(str(tmp_path / "sys"), AMD_ROOTS.proc_root, AMD_ROOTS.dev_root)
    wall = Wall()
    exporter = rocm(False, roots, wall)
    assert Scrape(exporter).value("gpu_health", GPU0) == 1
    device = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:05:00.0"
    # What needs the GPU or its firmware fails; the identity, VRAM bookkeeping and the
    # PCI core's link speeds are still there.
    for name in ("gpu_busy_percent", "mem_busy_percent", "pcie_replay_count", "pp_dpm_sclk",
                 "pp_dpm_mclk", "hwmon", "ras"):  # fmt: skip
        path = device / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()

    now = lasting(exporter, wall)

    assert now.value("gpu_health", GPU0) == 0
    assert now.evidence(0) == [("lost", "unreadable")]


# --- a RAS block that misses a read -------------------------------------------------


def test_a_ras_block_that_misses_one_read_adds_no_errors():
    amdsmi = FakeAmdSmi()
    amdsmi.ecc[UMC] = ras_counts(correctable=40)
    exporter = rocm(amdsmi)
    Scrape(exporter)
    amdsmi.failing_blocks = {UMC}
    missed = Scrape(exporter)
    assert missed.value("gpu_ecc_correct_umc", SMI0) is None  # not served as 0
    amdsmi.failing_blocks = set()

    now = Scrape(exporter)

    assert now.verdicts.gpus[0].evidence == ()  # not "correctable ECC errors rising (40)"


def test_a_ras_block_read_for_the_first_time_is_a_base_not_a_rise():
    amdsmi = FakeAmdSmi()
    amdsmi.ecc[UMC] = ras_counts(correctable=40, uncorrectable=0)
    amdsmi.failing_blocks = {UMC}
    exporter = rocm(amdsmi)
    Scrape(exporter)
    amdsmi.failing_blocks = set()

    now = Scrape(exporter)

    assert now.verdicts.gpus[0].evidence == ()


def test_uncorrectable_errors_still_count_while_their_block_misses_a_read():
    amdsmi, wall = FakeAmdSmi(), Wall()
    amdsmi.ecc[UMC] = ras_counts(uncorrectable=2)
    exporter = rocm(amdsmi, wall=wall)
    first = Scrape(exporter)
    assert first.evidence(0) == [("amd_health", "unhealthy")]
    seen_at = first.verdicts.gpus[0].evidence[0].at
    amdsmi.failing_blocks = {UMC}
    wall.now += 30

    missed = Scrape(exporter)

    assert missed.value("gpu_health", SMI0) == 0  # the flag does not flap healthy
    assert missed.verdicts.gpus[0].evidence[0].at == seen_at
    amdsmi.failing_blocks = set()
    wall.now += 30
    now = Scrape(exporter)
    assert now.evidence(0) == [("amd_health", "unhealthy")]  # no "2 new uncorrectable"
    assert now.verdicts.gpus[0].evidence[0].at == seen_at


def test_errors_a_block_adds_between_two_reads_are_judged():
    amdsmi = FakeAmdSmi()
    amdsmi.ecc[UMC] = ras_counts(correctable=40)
    exporter = rocm(amdsmi)
    Scrape(exporter)
    amdsmi.failing_blocks = {UMC}
    Scrape(exporter)
    amdsmi.failing_blocks = set()
    amdsmi.ecc[UMC] = ras_counts(correctable=55, uncorrectable=1)

    gpu = Scrape(exporter).verdicts.gpus[0]

    details = {e.code: e.detail for e in gpu.evidence}
    assert details["uncorrectable"] == "1 new uncorrectable ECC error(s)"
    assert details["correctable"].startswith("correctable ECC errors rising (15 ")


def test_a_count_the_driver_reset_is_a_new_base():
    amdsmi = FakeAmdSmi()
    amdsmi.ecc[UMC] = ras_counts(correctable=40)
    exporter = rocm(amdsmi)
    Scrape(exporter)
    amdsmi.ecc[UMC] = ras_counts(correctable=0)
    Scrape(exporter)
    amdsmi.ecc[UMC] = ras_counts(correctable=5)

    assert Scrape(exporter).verdicts.gpus[0].evidence == ()  # 5 new: under the burst


# --- amdsmi fails for a scrape ------------------------------------------------------


def test_a_scrape_where_amdsmi_fails_serves_sysfs_and_judges_nothing():
    amdsmi = FakeAmdSmi(count=2)
    exporter = rocm(amdsmi)
    Scrape(exporter)
    amdsmi.error = "AMDSMI_STATUS_DRM_ERROR - DRM error"

    fallback = Scrape(exporter)

    assert fallback.value("gpu_gfx_activity", GPU0) == 98  # sysfs's, under its labels
    assert fallback.value("gpu_ecc_uncorrect_total", GPU1) == 2
    # No verdict (nor boot line): the master keeps the node's last verdict.
    assert fallback.verdicts is None
    reason = (
        "amdsmi failed: AMDSMI_STATUS_DRM_ERROR - DRM error; "
        "read amdgpu sysfs this scrape, GPUs not judged"
    )
    labels = {"backend": "amdsmi", "reason": reason}
    assert fallback.value("mac_exporter_backend_available", labels) == 0
    amdsmi.error = ""

    now = Scrape(exporter)

    # sysfs's card 1 counted 2 uncorrectable errors: none of them are amdsmi's GPU 1's.
    assert [g.state for g in now.verdicts.gpus] == [HealthState.HEALTHY] * 2
    assert now.value("mac_exporter_backend_available", {"backend": "amdsmi", "reason": ""}) == 1


def test_amdsmi_failing_for_long_serves_its_gpus_degraded_not_judged():
    """One failed scrape serves no verdict (the master keeps the last one); a failure that
    lasts would keep that verdict for hours, so amdsmi's GPUs are served as it last listed
    them, degraded with its words, and what was judged before stays."""
    amdsmi, wall = FakeAmdSmi(count=2), Wall()
    exporter = rocm(amdsmi, wall=wall)
    Scrape(exporter)
    amdsmi.silent = {1}
    assert lasting(exporter, wall).evidence(1) == [("lost", "unreadable")]
    amdsmi.error = "AMDSMI_STATUS_DRM_ERROR - DRM error"
    assert Scrape(exporter).verdicts is None
    wall.now += UNREACHABLE_GRACE

    now = Scrape(exporter)

    gpu0, gpu1 = now.verdicts.gpus
    assert (gpu0.uuid, gpu0.state, gpu0.action) == (
        SMI0["gpu_uuid"], HealthState.DEGRADED, HealthAction.NONE
    )  # fmt: skip
    assert now.evidence(0) == [("lost", "unjudged")]
    assert "AMDSMI_STATUS_DRM_ERROR" in gpu0.evidence[0].detail
    assert now.evidence(1) == [("lost", "unreadable"), ("lost", "unjudged")]
    assert gpu1.state is HealthState.UNHEALTHY
    amdsmi.error, amdsmi.silent = "", set()

    back = Scrape(exporter)

    assert [g.state for g in back.verdicts.gpus] == [HealthState.HEALTHY] * 2


def test_amdsmi_failing_with_no_card_in_sysfs_either_reports_no_gpu():
    """Nothing to mix, and nothing found: the master finds every registered GPU missing."""
    amdsmi = FakeAmdSmi(count=2)
    roots = Roots("/nonexistent", AMD_ROOTS.proc_root, AMD_ROOTS.dev_root)
    exporter = rocm(amdsmi, roots)
    Scrape(exporter)
    amdsmi.error = "AMDSMI_STATUS_DRM_ERROR - DRM error"

    now = Scrape(exporter)

    assert now.verdicts is not None and now.verdicts.gpus == []


# --- across a restart of the exporter ----------------------------------------------


def test_an_ecc_verdict_outlives_a_restart_of_the_exporter(tmp_path):
    amdsmi, wall = FakeAmdSmi(), Wall()
    kept = tmp_path / "gpu-evidence-rocm-exporter.json"
    before = rocm(amdsmi, wall=wall, kept=kept)
    Scrape(before)
    amdsmi.ecc[UMC] = ras_counts(correctable=3, uncorrectable=1)
    seen = Scrape(before).verdicts.gpus[0]
    assert ("ecc", "uncorrectable") in [(e.source, e.code) for e in seen.evidence]
    wall.now += 60

    after = Scrape(rocm(amdsmi, wall=wall, kept=kept))

    assert after.verdicts.gpus[0] == seen  # the same evidence, seen at the same time
    labels = {"backend": "evidence_state", "reason": ""}
    assert after.value("mac_exporter_backend_available", labels) == 1


def test_errors_a_block_counted_while_the_exporter_was_down_are_judged(tmp_path):
    amdsmi, wall = FakeAmdSmi(), Wall()
    amdsmi.ecc[UMC] = ras_counts(correctable=40)
    kept = tmp_path / "gpu-evidence-rocm-exporter.json"
    Scrape(rocm(amdsmi, wall=wall, kept=kept))
    amdsmi.ecc[UMC] = ras_counts(correctable=55, uncorrectable=1)  # while none ran
    wall.now += 60

    gpu = Scrape(rocm(amdsmi, wall=wall, kept=kept)).verdicts.gpus[0]

    details = {e.code: (e.detail, e.at) for e in gpu.evidence}
    assert details["uncorrectable"] == ("1 new uncorrectable ECC error(s)", wall.now)
    assert details["correctable"][0].startswith("correctable ECC errors rising (15 ")


def test_a_gpu_that_answered_before_the_restart_and_not_after_is_unreadable(tmp_path):
    amdsmi, wall = FakeAmdSmi(count=2), Wall()
    kept = tmp_path / "gpu-evidence-rocm-exporter.json"
    Scrape(rocm(amdsmi, wall=wall, kept=kept))
    amdsmi.silent = {1}

    now = lasting(rocm(amdsmi, wall=wall, kept=kept), wall)

    assert now.evidence(1) == [("lost", "unreadable")]


def test_a_state_folder_the_exporter_cannot_write_says_so_and_judging_goes_on(tmp_path):
    amdsmi = FakeAmdSmi()
    (tmp_path / "taken").write_text("a file where the folder should be")
    exporter = rocm(amdsmi, kept=tmp_path / "taken" / "gpu-evidence-rocm-exporter.json")
    Scrape(exporter)
    amdsmi.ecc[UMC] = ras_counts(correctable=3, uncorrectable=1)

    now = Scrape(exporter)

    assert now.verdicts.gpus[0].state is HealthState.UNHEALTHY
    (line,) = [x for x in now.samples if x[0] == "mac_exporter_backend_available"
               and ("backend", "evidence_state") in x[1]]  # fmt: skip
    assert now.samples[line] == 0 and "cannot write" in dict(line[1])["reason"]


def test_the_exporter_keeps_its_evidence_in_the_state_folder_it_is_given(tmp_path):
    exporter = build(Options(roots=AMD_ROOTS, state_dir=tmp_path))
    (source,) = [each for each in exporter.runner.sources if isinstance(each, AmdGpuSource)]
    assert source._evidence.path == tmp_path / "gpu-evidence-rocm-exporter.json"
