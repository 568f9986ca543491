"""The judge: evidence from readings and XID events, and how each kind of evidence clears."""

from __future__ import annotations

from contract.verdicts import HealthAction, HealthState
from node.gpu.health import AmdReading, GpuJudge, NvidiaReading

T = 1_781_000_000.0
WINDOW = 60.0


def gpu(**fields) -> NvidiaReading:
    return NvidiaReading(3, "GPU-d", "1650", **fields)


def judged(judge: GpuJudge, now: float, **fields):
    return judge.nvidia(gpu(**fields), now)


def test_a_quiet_gpu_is_healthy():
    verdict = judged(GpuJudge(WINDOW), T, ecc_uncorrectable=0, clock_reasons=0x4)
    assert (verdict.state, verdict.action, verdict.evidence) == (
        HealthState.HEALTHY, HealthAction.NONE, ()
    )  # fmt: skip


def test_xid_79_makes_the_gpu_unhealthy_until_the_window_has_passed():
    judge = GpuJudge(WINDOW)
    judge.xid(3, 79, T)
    verdict = judged(judge, T + 1)
    assert (verdict.state, verdict.action) == (HealthState.UNHEALTHY, HealthAction.REBOOT)
    (item,) = verdict.evidence
    assert (item.source, item.code, item.at, item.gpu, item.serial) == ("xid", "79", T, "3", "1650")
    assert judged(judge, T + WINDOW - 1).state is HealthState.UNHEALTHY
    assert judged(judge, T + WINDOW + 1).evidence == ()


def test_xid_13_is_the_applications_fault():
    judge = GpuJudge(WINDOW)
    judge.xid(3, 13, T)
    verdict = judged(judge, T)
    assert (verdict.state, verdict.action) == (HealthState.HEALTHY, HealthAction.RESTART_APP)


def test_the_same_xid_again_moves_its_time_not_its_count():
    judge = GpuJudge(WINDOW)
    judge.xid(3, 48, T)
    judge.xid(3, 48, T + 30)
    (item,) = judged(judge, T + 31).evidence
    assert item.at == T + 30
    assert judged(judge, T + 30 + WINDOW - 1).state is HealthState.UNHEALTHY


def test_uncorrectable_ecc_is_judged_by_its_increase_not_its_value():
    judge = GpuJudge(WINDOW)
    # A count carried over from before the exporter started is the baseline.
    assert judged(judge, T, ecc_uncorrectable=5).evidence == ()
    verdict = judged(judge, T + 10, ecc_uncorrectable=7)
    assert (verdict.state, verdict.action) == (HealthState.UNHEALTHY, HealthAction.RESET_GPU)
    assert verdict.evidence[0].detail == "2 new uncorrectable ECC error(s)"
    # The driver reset its counters (a GPU reset): a lower value is the new base.
    assert judged(judge, T + 20, ecc_uncorrectable=0).state is HealthState.UNHEALTHY
    assert judged(judge, T + 10 + WINDOW + 1, ecc_uncorrectable=0).evidence == ()


def test_correctable_errors_degrade_only_as_a_burst():
    judge = GpuJudge(WINDOW)
    judged(judge, T, ecc_correctable=100)
    assert judged(judge, T + 1, ecc_correctable=103).evidence == ()
    assert judged(judge, T + 2, ecc_correctable=120).state is HealthState.DEGRADED


def test_conditions_keep_their_first_time_and_clear_when_they_end():
    judge = GpuJudge(WINDOW)
    first = judged(judge, T, remap_pending=True, remap_failed=False)
    later = judged(judge, T + 30, remap_pending=True, remap_failed=False)
    assert first == later  # the same bytes on the wire: the master skips it
    assert (later.state, later.action) == (HealthState.DEGRADED, HealthAction.RESET_GPU)
    assert judged(judge, T + 31, remap_pending=False).evidence == ()


def test_a_failed_remap_means_the_hardware():
    verdict = judged(GpuJudge(WINDOW), T, remap_pending=False, remap_failed=True)
    assert (verdict.state, verdict.action) == (HealthState.UNHEALTHY, HealthAction.INSPECT_HARDWARE)


def test_a_lost_gpu_needs_a_reboot():
    verdict = judged(GpuJudge(WINDOW), T, lost=True)
    assert (verdict.state, verdict.action) == (HealthState.UNHEALTHY, HealthAction.REBOOT)
    assert verdict.evidence[0].source == "lost"


def test_the_drivers_recovery_action_is_taken_as_it_says():
    judge = GpuJudge(WINDOW)
    assert judged(judge, T, recovery_action=0).evidence == ()
    verdict = judged(judge, T + 1, recovery_action=2)
    assert (verdict.state, verdict.action) == (HealthState.UNHEALTHY, HealthAction.REBOOT)
    verdict = judged(judge, T + 2, recovery_action=1)
    assert verdict.action is HealthAction.RESET_GPU and verdict.evidence[0].at == T + 2
    assert judged(judge, T + 3, recovery_action=0).evidence == ()


def test_a_recovery_action_this_mac_does_not_know_is_worth_a_look_not_a_drain():
    """A newer driver's value (8 and up): the driver asks for something; ignored, the GPU
    was served healthy."""
    judge = GpuJudge(WINDOW)
    verdict = judged(judge, T, recovery_action=9)
    assert (verdict.state, verdict.action) == (HealthState.DEGRADED, HealthAction.NONE)
    assert [(e.source, e.code) for e in verdict.evidence] == [("recovery_action", "9")]
    assert "does not know" in verdict.evidence[0].detail
    assert judged(judge, T + 1, recovery_action=0).evidence == ()


def test_thermal_and_power_slowdowns_degrade_a_power_cap_does_not():
    judge = GpuJudge(WINDOW)
    assert judged(judge, T, clock_reasons=0x4).evidence == ()  # SW power cap: normal
    verdict = judged(judge, T + 1, clock_reasons=0x40 | 0x4)
    assert (verdict.state, verdict.action) == (HealthState.DEGRADED, HealthAction.NONE)
    assert verdict.evidence[0].detail == "clocks held back: hardware thermal slowdown"


def test_nvlink_errors_rising_degrade():
    judge = GpuJudge(WINDOW)
    judged(judge, T, nvlink_errors=0)
    assert judged(judge, T + 1, nvlink_errors=50).state is HealthState.DEGRADED


def test_amd_uncorrectable_ecc_and_the_health_flag_are_unhealthy():
    judge = GpuJudge(WINDOW)
    assert (
        judge.amd(AmdReading(1, "u", "s", health_flag=True, ecc_uncorrectable=0), T).evidence == ()
    )
    verdict = judge.amd(AmdReading(1, "u", "s", health_flag=False, ecc_uncorrectable=2), T + 5)
    assert verdict.state is HealthState.UNHEALTHY
    assert {(e.source, e.action) for e in verdict.evidence} == {
        ("ecc", HealthAction.RESET_GPU), ("amd_health", HealthAction.REBOOT)
    }  # fmt: skip
    assert verdict.vendor == "amd"


def test_a_question_nvml_leaves_unanswered_clears_no_condition():
    """None is "NVML did not say" (the remap query under MIG, a query this driver lacks):
    only an answer that says the condition ended clears it."""
    judge = GpuJudge(WINDOW)
    first = judged(judge, T, remap_failed=True, remap_pending=False, recovery_action=1,
                   clock_reasons=0x40)  # fmt: skip
    assert judged(judge, T + 10) == first
    assert (
        judged(judge, T + 20, remap_failed=False, recovery_action=0, clock_reasons=0).evidence == ()
    )


def test_the_driver_asking_to_drain_peer_to_peer_work_drains_the_node():
    """NVIDIA: terminate the GPU processes that do peer-to-peer work, then ask again."""
    verdict = judged(GpuJudge(WINDOW), T, recovery_action=3)
    assert (verdict.state, verdict.action) == (HealthState.UNHEALTHY, HealthAction.RESET_GPU)


def test_windows_run_on_the_monotonic_tick_and_evidence_keeps_the_wall_time():
    judge = GpuJudge(WINDOW)
    judge.xid(3, 79, T, tick=1000.0)
    judge.nvidia(gpu(ecc_uncorrectable=0), T, tick=1000.0)
    stepped = judge.nvidia(gpu(ecc_uncorrectable=1), T + 7200, tick=1001.0)  # NTP: +2 h
    assert {(e.source, e.at) for e in stepped.evidence} == {("xid", T), ("ecc", T + 7200)}
    assert judge.nvidia(gpu(ecc_uncorrectable=1), T + 7250, tick=1050.0) == stepped
    assert judge.nvidia(gpu(ecc_uncorrectable=1), T + 7300, tick=1000.0 + WINDOW + 2).evidence == ()


def test_amds_health_flag_asks_for_a_reboot_a_reset_keeps_the_drivers_counts():
    verdict = GpuJudge(WINDOW).amd(AmdReading(1, "u", "s", health_flag=False), T)
    assert (verdict.state, verdict.action) == (HealthState.UNHEALTHY, HealthAction.REBOOT)
