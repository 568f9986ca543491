"""The judge's memory across a restart of its exporter: kept on the same boot, by GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.verdicts import HealthAction, HealthState
from node.gpu.evidence_state import EvidenceState, forget_reset_gpu, gpu_key
from node.gpu.health import GpuJudge, NvidiaReading
from node.host import Roots

T = 1_781_000_000.0  # wall time
TICK = 5_000.0  # monotonic: seconds since boot
WINDOW = 600.0
BOOT = "0f6c1b52-5d5e-4c1e-9a7d-4b1e2f3a6c80"
UUID = "GPU-8c4f2b1a-1111-2222-3333-444455556666"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Exporter:
    """What an exporter does with the judge and its state file, at one run of it."""

    def __init__(self, folder: Path, tick: Clock, boot: str = BOOT) -> None:
        proc = folder / "proc"
        (proc / "sys/kernel/random").mkdir(parents=True, exist_ok=True)
        if boot:
            (proc / "sys/kernel/random/boot_id").write_text(boot + "\n")
        else:
            (proc / "sys/kernel/random/boot_id").unlink(missing_ok=True)
        self.tick = tick
        self.judge = GpuJudge(WINDOW)
        self.state = EvidenceState(
            folder / "gpu-evidence-dcgm-exporter.json", Roots(proc_root=str(proc))
        )

    def scrape(self, now: float, *readings: NvidiaReading):
        verdicts = []
        for reading in readings:
            kept = self.state.bind(reading.index, gpu_key(reading.index, reading.uuid))
            if kept is not None:
                self.judge.restore(reading.index, kept.memory)
            verdicts.append(self.judge.nvidia(reading, now, self.tick()))
        self.state.save(self.judge.memories())
        return verdicts


def gpu(index: int = 0, uuid: str = UUID, **fields) -> NvidiaReading:
    return NvidiaReading(index, uuid, "1650", **fields)


def restarted_after_a_rise(tmp_path: Path, tick: Clock) -> Exporter:
    """An exporter that saw 2 new uncorrectable errors at TICK, then a new one."""
    before = Exporter(tmp_path, tick)
    before.scrape(T, gpu(ecc_uncorrectable=1))
    tick.now += 10
    (verdict,) = before.scrape(T + 10, gpu(ecc_uncorrectable=3))
    assert verdict.state is HealthState.UNHEALTHY
    tick.now += 5
    return Exporter(tmp_path, tick)


def test_an_ecc_rise_stays_unhealthy_across_a_restart_until_its_window_ends(tmp_path):
    tick = Clock(TICK)
    after = restarted_after_a_rise(tmp_path, tick)

    (verdict,) = after.scrape(T + 15, gpu(ecc_uncorrectable=3))

    assert (verdict.state, verdict.action) == (HealthState.UNHEALTHY, HealthAction.RESET_GPU)
    (item,) = verdict.evidence
    assert (item.detail, item.at) == ("2 new uncorrectable ECC error(s)", T + 10)
    tick.now = TICK + 10 + WINDOW - 1  # measured on the monotonic clock, not the wall's
    assert after.scrape(T, gpu(ecc_uncorrectable=3))[0].state is HealthState.UNHEALTHY
    tick.now = TICK + 10 + WINDOW
    assert after.scrape(T + 10 * WINDOW, gpu(ecc_uncorrectable=3))[0].evidence == ()


def test_a_rise_while_the_exporter_was_down_counts_at_the_first_reading(tmp_path):
    tick = Clock(TICK)
    before = Exporter(tmp_path, tick)
    assert before.scrape(T, gpu(ecc_uncorrectable=4))[0].evidence == ()
    tick.now += 60
    after = Exporter(tmp_path, tick)

    (verdict,) = after.scrape(T + 60, gpu(ecc_uncorrectable=5))

    (item,) = verdict.evidence
    assert (item.code, item.detail, item.at) == (
        "uncorrectable", "1 new uncorrectable ECC error(s)", T + 60
    )  # fmt: skip


def test_a_counter_lower_than_the_kept_one_is_a_driver_reset_a_new_base(tmp_path):
    tick = Clock(TICK)
    before = Exporter(tmp_path, tick)
    before.scrape(T, gpu(ecc_correctable=40))
    after = Exporter(tmp_path, tick)
    assert after.scrape(T, gpu(ecc_correctable=0))[0].evidence == ()

    (verdict,) = after.scrape(T, gpu(ecc_correctable=5))

    assert verdict.evidence == ()  # 5 new: under the burst


def test_a_condition_keeps_when_it_was_first_seen_so_the_verdict_keeps_its_bytes(tmp_path):
    tick = Clock(TICK)
    before = Exporter(tmp_path, tick)
    (first,) = before.scrape(T, gpu(remap_pending=True, recovery_action=4))
    after = Exporter(tmp_path, tick)

    (verdict,) = after.scrape(T + 30, gpu(remap_pending=True))  # the driver does not say

    assert verdict == first


def test_a_file_of_another_boot_is_not_restored(tmp_path, caplog):
    tick = Clock(TICK)
    before = Exporter(tmp_path, tick)
    before.scrape(T, gpu(ecc_uncorrectable=1))
    before.scrape(T, gpu(ecc_uncorrectable=3))
    after = Exporter(tmp_path, Clock(20.0), boot="9d1e3c5a-0000-4000-8000-000000000001")

    with caplog.at_level("INFO", logger="exporters"):
        (verdict,) = after.scrape(T + 99, gpu(ecc_uncorrectable=3))

    assert verdict.evidence == ()
    assert "is of another boot" in caplog.text
    assert after.state.problem() == ""  # a reboot is no fault of the file


def test_without_a_boot_id_nothing_is_kept_and_the_state_says_why(tmp_path):
    exporter = Exporter(tmp_path, Clock(TICK), boot="")

    exporter.scrape(T, gpu(ecc_uncorrectable=1))

    assert not exporter.state.path.exists()
    assert "cannot read the kernel's boot id" in exporter.state.problem()


def test_a_gpu_with_another_uuid_at_the_same_index_gets_nothing(tmp_path):
    tick = Clock(TICK)
    after = restarted_after_a_rise(tmp_path, tick)

    (verdict,) = after.scrape(T + 15, gpu(uuid="GPU-00000000-replaced", ecc_uncorrectable=3))

    assert verdict.evidence == ()


def test_a_renumbered_gpu_keeps_its_own_evidence(tmp_path):
    tick = Clock(TICK)
    after = restarted_after_a_rise(tmp_path, tick)

    other, renumbered = after.scrape(
        T + 15, gpu(0, "GPU-00000000-other", ecc_uncorrectable=3), gpu(1, ecc_uncorrectable=3)
    )

    assert other.evidence == ()
    assert renumbered.state is HealthState.UNHEALTHY


def test_a_gpu_not_listed_since_the_restart_keeps_what_was_kept_of_it(tmp_path):
    tick = Clock(TICK)
    after = restarted_after_a_rise(tmp_path, tick)
    after.scrape(T + 15, gpu(1, "GPU-00000000-other", ecc_uncorrectable=0))
    again = Exporter(tmp_path, tick)

    (verdict,) = again.scrape(T + 20, gpu(ecc_uncorrectable=3))

    assert verdict.state is HealthState.UNHEALTHY


def test_the_file_is_written_only_when_the_memory_changed(tmp_path, monkeypatch):
    tick = Clock(TICK)
    exporter = Exporter(tmp_path, tick)
    writes = []
    write = exporter.state._write
    monkeypatch.setattr(exporter.state, "_write", lambda text: writes.append(write(text)))

    exporter.scrape(T, gpu(ecc_uncorrectable=1))
    tick.now += 15
    exporter.scrape(T + 15, gpu(ecc_uncorrectable=1))
    assert len(writes) == 1
    exporter.scrape(T + 30, gpu(ecc_uncorrectable=2))
    assert len(writes) == 2


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "is not a GPU evidence file MAC reads"),
        (json.dumps({"version": 99, "boot_id": BOOT, "gpus": {}}), "version 99"),
        (
            json.dumps({"version": 1, "boot_id": BOOT, "gpus": {"x": []}}),
            "x: not an object",
        ),
    ],
)
def test_a_file_that_is_not_one_this_mac_reads_is_judged_from_scratch(tmp_path, text, words):
    tick = Clock(TICK)
    exporter = Exporter(tmp_path, tick)
    exporter.state.path.write_text(text)

    exporter.scrape(T, gpu(ecc_uncorrectable=1))
    (verdict,) = exporter.scrape(T, gpu(ecc_uncorrectable=2))

    assert verdict.state is HealthState.UNHEALTHY  # judging goes on
    assert words in exporter.state.problem()
    assert "judged from scratch" in exporter.state.problem()
    assert json.loads(exporter.state.path.read_text())["version"] == 1  # written anew


def test_a_file_that_cannot_be_written_says_so_and_judging_goes_on(tmp_path, caplog):
    tick = Clock(TICK)
    exporter = Exporter(tmp_path, tick)
    # Where the file goes, a folder: the rename onto it fails, even as root.
    (tmp_path / "gpu-evidence-dcgm-exporter.json").mkdir()

    with caplog.at_level("WARNING", logger="exporters"):
        exporter.scrape(T, gpu(ecc_uncorrectable=1))
        (verdict,) = exporter.scrape(T, gpu(ecc_uncorrectable=2))

    assert verdict.state is HealthState.UNHEALTHY
    assert f"cannot write {exporter.state.path}" in exporter.state.problem()
    assert caplog.text.count("cannot write") == 1  # warned once


def _kept_file(folder: Path, service: str, gpus: dict) -> Path:
    path = folder / f"gpu-evidence-{service}.json"
    path.write_text(json.dumps({"version": 1, "boot_id": BOOT, "gpus": gpus}))
    return path


def test_a_gpu_reset_drops_what_every_exporter_keeps_of_that_gpu_alone(tmp_path):
    """`mac gpu reset` names an NVIDIA GPU by its UUID (whatever index it was judged at)
    and an AMD one by its index; the other GPUs keep their evidence."""
    uuid = "GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
    nvidia = _kept_file(tmp_path, "dcgm-exporter", {uuid: {"index": 3}, "GPU-other": {"index": 1}})
    amd = _kept_file(
        tmp_path,
        "rocm-exporter",
        {"serial-a partition 1": {"index": 1}, "serial-b": {"index": 2}},
    )

    assert forget_reset_gpu(tmp_path, 1, uuid) == ([str(nvidia)], [])
    assert set(json.loads(nvidia.read_text())["gpus"]) == {"GPU-other"}
    assert forget_reset_gpu(tmp_path, 1) == ([str(nvidia), str(amd)], [])
    assert json.loads(nvidia.read_text())["gpus"] == {}
    assert set(json.loads(amd.read_text())["gpus"]) == {"serial-b"}
    assert forget_reset_gpu(tmp_path, 7) == ([], [])  # nothing kept of it: nothing written


def test_a_kept_file_a_reset_cannot_read_is_a_problem_in_words_not_an_error(tmp_path):
    (tmp_path / "gpu-evidence-dcgm-exporter.json").write_text('{"version": 1, "gpus"')

    changed, problems = forget_reset_gpu(tmp_path, 0, "")

    assert changed == [] and len(problems) == 1
    assert problems[0].startswith(f"{tmp_path / 'gpu-evidence-dcgm-exporter.json'}: ")
    assert forget_reset_gpu(tmp_path / "missing", 0) == ([], [])  # no folder: nothing kept
