"""dcgm-exporter's verdict when NVML answers with an error: which errors mean "not here",
which take the GPU out of reach, and what the XID intake and the clocks do meanwhile."""

from __future__ import annotations

import pytest

from contract.verdicts import VERDICT_METRICS, HealthAction, HealthState, parse_verdicts
from exporters.nvidia import NvmlSource, generate_dcgm_latest
from exporters.runtime import Exporter
from node.gpu.health import UNREACHABLE_GRACE
from node.host import Roots
from testkit.fakes.nvml import two_h200s
from tests.exporters.conftest import FIXTURES

ROOTS = Roots(proc_root=str(FIXTURES / "proc"))
GPU1 = {"gpu": "1", "UUID": "GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"}


class Clock:
    """A settable clock: ``wall`` for the evidence's time, ``tick`` for the windows."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def dcgm(nvml, wall: Clock, tick: Clock | None = None, window: float = 60.0) -> Exporter:
    source = NvmlSource("gpu-node-17", nvml=nvml, clock=tick or Clock(100.0), roots=ROOTS,
                        window=window, wall=wall)  # fmt: skip
    return Exporter("dcgm-exporter", [source], exposition=generate_dcgm_latest)


def verdicts(exporter: Exporter):
    return parse_verdicts(exporter.page(VERDICT_METRICS), "nvidia")


def lost_flag(exporter: Exporter, gpu: str = "1") -> float | None:
    page = exporter.page(["mac_gpu_lost"]).decode()
    for line in page.splitlines():
        if line.startswith("mac_gpu_lost{") and f'gpu="{gpu}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.parametrize(
    ("error", "code", "action"),
    [
        ("NVML_ERROR_UNKNOWN", "unreachable", HealthAction.REBOOT),
        ("NVML_ERROR_TIMEOUT", "unreachable", HealthAction.REBOOT),
        ("NVML_ERROR_IRQ_ISSUE", "unreachable", HealthAction.REBOOT),
        ("NVML_ERROR_INSUFFICIENT_POWER", "insufficient_power", HealthAction.INSPECT_HARDWARE),
    ],
)
def test_a_gpu_whose_handle_works_but_every_query_fails_is_out_of_reach(error, code, action):
    """After an XID 79 some drivers still give the handle and answer every query with
    Unknown Error: each failed query was skipped like NOT_SUPPORTED, and the GPU read
    healthy once the XID left the window."""
    nvml, wall, tick = two_h200s(), Clock(1_781_000_000.0), Clock(100.0)
    exporter = dcgm(nvml, wall, tick)
    verdicts(exporter)
    nvml.gpus[1].query_error = getattr(nvml, error)
    if code == "unreachable":  # an error that a passing hiccup gives too: once it lasts
        assert verdicts(exporter).gpus[1].evidence == ()
        assert lost_flag(exporter) == 1.0
        wall.now += UNREACHABLE_GRACE
        tick.now += UNREACHABLE_GRACE

    gpu1 = verdicts(exporter).gpus[1]

    assert (gpu1.state, gpu1.action) == (HealthState.UNHEALTHY, action)
    assert [(e.source, e.code) for e in gpu1.evidence] == [("lost", code)]
    detail = gpu1.evidence[0].detail  # NVML's words, or the error's name
    assert f"NVML error {getattr(nvml, error)}" in detail or error in detail
    assert lost_flag(exporter) == 1.0
    assert verdicts(exporter).gpus[0].state is HealthState.HEALTHY
    nvml.gpus[1].query_error = None
    assert verdicts(exporter).gpus[1].evidence == ()
    assert lost_flag(exporter) == 0.0


def test_one_field_that_fails_while_the_others_answer_is_skipped_not_a_verdict():
    """A healthy GPU whose driver answers one field with Unknown Error (an odd field on an
    older driver) keeps its verdict: taking it out of reach would drain every node that
    has that driver."""
    nvml, wall, tick = two_h200s(), Clock(1_781_000_000.0), Clock(100.0)
    exporter = dcgm(nvml, wall, tick)
    nvml.gpus[1].field_errors = {"sm_clock": nvml.NVML_ERROR_UNKNOWN}
    for _ in range(3):
        assert verdicts(exporter).gpus[1].evidence == ()
        wall.now += UNREACHABLE_GRACE
        tick.now += UNREACHABLE_GRACE
    assert lost_flag(exporter) == 0.0
    served = [line.split("{")[0] for line in exporter.page().decode().splitlines()
              if f'UUID="{GPU1["UUID"]}"' in line]  # fmt: skip
    assert "DCGM_FI_DEV_GPU_TEMP" in served and "DCGM_FI_DEV_SM_CLOCK" not in served


def test_insufficient_power_on_the_handle_asks_for_the_hardware_not_a_reboot():
    nvml, wall = two_h200s(), Clock(1_781_000_000.0)
    exporter = dcgm(nvml, wall)
    verdicts(exporter)
    nvml.gpus[1].error = nvml.NVML_ERROR_INSUFFICIENT_POWER

    gpu1 = verdicts(exporter).gpus[1]

    assert (gpu1.state, gpu1.action) == (HealthState.UNHEALTHY, HealthAction.INSPECT_HARDWARE)
    assert gpu1.evidence[0].code == "insufficient_power"


def test_a_query_the_gpu_does_not_support_is_skipped_not_judged():
    nvml, wall = two_h200s(), Clock(1_781_000_000.0)
    exporter = dcgm(nvml, wall)
    nvml.gpus[1].gpm_error = nvml.NVML_ERROR_NO_PERMISSION  # profiling needs rights
    nvml.gpus[1].enc_util = None  # NOT_SUPPORTED

    assert verdicts(exporter).gpus[1].evidence == ()
    assert lost_flag(exporter) == 0.0


def test_a_gpu_the_exporter_may_not_open_is_said_to_be_unjudged_not_healthy():
    """The master reads a GPU left out as missing (unhealthy, reboot: a drain); a
    permission is no reason to drain. So the GPU is served degraded with the reason."""
    nvml, wall = two_h200s(), Clock(1_781_000_000.0)
    exporter = dcgm(nvml, wall)
    nvml.gpus[1].error = nvml.NVML_ERROR_NO_PERMISSION

    gpu1 = verdicts(exporter).gpus[1]

    assert (gpu1.state, gpu1.action) == (HealthState.DEGRADED, HealthAction.NONE)
    (item,) = gpu1.evidence
    assert item.code == "no_access" and "Insufficient Permissions" in item.detail
    assert lost_flag(exporter) == 0.0


def test_a_failed_remap_outlives_the_remap_query_going_unanswered():
    """NVML does not answer the remapped-rows query on a MIG-enabled GPU with active
    instances: a failure it reported before is still the hardware's."""
    nvml, wall = two_h200s(), Clock(1_781_000_000.0)
    exporter = dcgm(nvml, wall)
    nvml.gpus[0].remapped_rows = (0, 3, 0, 1)
    first = verdicts(exporter).gpus[0]
    assert first.action is HealthAction.INSPECT_HARDWARE
    nvml.gpus[0].remapped_rows = None  # MIG instances created: NOT_SUPPORTED

    gpu0 = verdicts(exporter).gpus[0]

    assert gpu0 == first  # the same evidence, the same time
    nvml.gpus[0].remapped_rows = (0, 3, 0, 0)  # an answer that says otherwise clears it
    assert verdicts(exporter).gpus[0].evidence == ()


def test_xid_events_that_cannot_be_read_are_said_after_three_scrapes_in_a_row():
    nvml, wall = two_h200s(), Clock(1_781_000_000.0)
    exporter = dcgm(nvml, wall)
    nvml.wait_error = nvml.NVML_ERROR_UNKNOWN
    assert verdicts(exporter).gpus[0].evidence == ()  # one failed wait: not yet
    verdicts(exporter)

    judged = verdicts(exporter)

    for gpu in judged.gpus:
        assert (gpu.state, gpu.action) == (HealthState.DEGRADED, HealthAction.NONE)
        (item,) = gpu.evidence
        assert (item.source, item.code) == ("xid", "unreadable")
        assert "Unknown Error" in item.detail
    nvml.wait_error = None  # the wait answers again (an event or a timeout)
    assert [g.evidence for g in verdicts(exporter).gpus] == [(), ()]


def test_a_wait_error_does_not_lose_the_events_read_before_it():
    nvml, wall = two_h200s(), Clock(1_781_000_000.0)
    exporter = dcgm(nvml, wall)
    nvml.pending_xids = [(0, 79)]
    assert ("xid", "79") in [(e.source, e.code) for e in verdicts(exporter).gpus[0].evidence]
    nvml.wait_error = nvml.NVML_ERROR_UNKNOWN

    assert verdicts(exporter).gpus[0].state is HealthState.UNHEALTHY


def test_a_wall_clock_step_neither_clears_evidence_nor_changes_its_time():
    """NTP steps the wall clock forward an hour: the XID is still within its window, on
    the monotonic clock, and its evidence keeps the time it was seen."""
    nvml, wall, tick = two_h200s(), Clock(1_781_000_000.0), Clock(500.0)
    exporter = dcgm(nvml, wall, tick, window=60)
    nvml.pending_xids = [(1, 79)]
    before = exporter.page(VERDICT_METRICS)
    assert parse_verdicts(before, "nvidia").gpus[1].evidence[0].at == 1_781_000_000.0

    wall.now += 3600
    tick.now += 30

    assert exporter.page(VERDICT_METRICS) == before  # the same bytes: the master skips it
    tick.now += 31
    assert verdicts(exporter).gpus[1].evidence == ()
