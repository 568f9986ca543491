"""The verdict's vocabulary: severity order, the evidence in words, the wire read back."""

from __future__ import annotations

import calendar
import time

import pytest

from contract.verdicts import (
    ACTION_FIXES,
    CLOCK_IN_WORDS,
    Evidence,
    GpuVerdict,
    HealthAction,
    HealthState,
    answer_digest,
    gpu_fix,
    parse_verdicts,
    reset_command,
    verdict_line,
    worst_action,
    worst_state,
)

AT = calendar.timegm((2026, 3, 1, 14, 2, 11))  # 14:02:11 UTC


def lost(gpu: str = "3") -> Evidence:
    return Evidence(
        "xid", "79", "XID 79: GPU has fallen off the bus", HealthState.UNHEALTHY,
        HealthAction.REBOOT, AT, gpu, "GPU-5d2f7b1e", "1650924060123",
    )  # fmt: skip


def test_states_and_actions_are_ordered_by_severity():
    assert worst_state(["healthy", "unhealthy", "degraded"]) is HealthState.UNHEALTHY
    assert worst_state([]) is HealthState.HEALTHY
    assert (
        worst_action(["restart_app", "inspect_hardware", "reboot"]) is HealthAction.INSPECT_HARDWARE
    )
    assert worst_action([]) is HealthAction.NONE
    assert [s.severity for s in HealthState] == [0, 1, 2]


def test_a_gpu_without_evidence_is_healthy_with_nothing_to_do():
    verdict = GpuVerdict("0", "GPU-1")
    assert (verdict.state, verdict.action) == (HealthState.HEALTHY, HealthAction.NONE)
    assert verdict.identity == "GPU-1"
    assert GpuVerdict("0", "GPU-1", "1650").identity == "1650"


def test_the_line_names_the_gpu_the_evidence_its_time_and_the_action():
    line = verdict_line([lost()])
    assert line.startswith(
        "GPU 3 (UUID GPU-5d2f7b1e, serial 1650924060123) XID 79: GPU has fallen off the bus at "
    )
    assert line.endswith("14:02:11; reboot")


def test_the_line_leads_with_the_worst_item_and_counts_the_rest():
    slow = Evidence("throttle", "0x40", "clocks held back", HealthState.DEGRADED,
                    HealthAction.NONE, AT, "1")  # fmt: skip
    line = verdict_line([slow, lost()])
    assert line.startswith("GPU 3 ") and "(+1 more); reboot" in line
    assert verdict_line([slow]) == slow.words()  # degraded, nothing to do: no action said


def test_an_application_error_alone_still_says_its_action():
    app = Evidence("xid", "13", "XID 13: graphics engine exception", HealthState.HEALTHY,
                   HealthAction.RESTART_APP, AT, "0")  # fmt: skip
    assert verdict_line([app]).endswith("; restart_app")
    assert verdict_line([]) == ""


def test_evidence_survives_a_round_trip_through_json():
    assert Evidence.from_dict(lost().as_dict()) == lost()


PAGE = b"""\
# HELP mac_gpu_health Health verdict of the GPU.
# TYPE mac_gpu_health gauge
mac_gpu_health{gpu="0",UUID="GPU-a",serial="s0",state="healthy",action="none"} 0.0
mac_gpu_health{gpu="3",UUID="GPU-d",serial="s3",state="unhealthy",action="reboot"} 2.0
# TYPE mac_gpu_health_evidence gauge
mac_gpu_health_evidence{gpu="3",UUID="GPU-d",serial="s3",source="xid",code="79",\
state="unhealthy",action="reboot",detail="XID 79: GPU has fallen off the bus"} 1.7e+09
# TYPE mac_node_boot_info gauge
mac_node_boot_info{boot_id="b-1"} 1.0
"""


def test_the_wire_is_read_back_per_gpu_with_its_evidence():
    found = parse_verdicts(PAGE, "nvidia")
    assert found is not None and found.complete and found.boot_id == "b-1"
    assert [(g.index, g.uuid, g.serial, g.state) for g in found.gpus] == [
        ("0", "GPU-a", "s0", HealthState.HEALTHY),
        ("3", "GPU-d", "s3", HealthState.UNHEALTHY),
    ]
    (item,) = found.gpus[1].evidence
    assert (item.fault_key, item.at, item.serial) == ("xid:79", 1.7e9, "s3")


def test_amd_labels_name_the_gpu_too():
    page = (
        b'mac_gpu_health{gpu_id="1",gpu_uuid="u1",serial_number="0x2B",state="healthy",'
        b'action="none"} 0\nmac_node_boot_info{boot_id="b"} 1\n'
    )
    (gpu,) = parse_verdicts(page, "amd").gpus
    assert (gpu.index, gpu.uuid, gpu.serial, gpu.vendor) == ("1", "u1", "0x2B", "amd")


def test_an_answer_without_the_boot_line_holds_no_verdict():
    assert parse_verdicts(b"# TYPE mac_exporter_build_info gauge\n") is None
    assert parse_verdicts(b"not prometheus {{{\n") is None


def test_an_answer_cut_at_the_cap_keeps_whole_lines_and_says_so():
    cut = PAGE + b'mac_gpu_health{gpu="4",UUID="GPU-e",sta'
    found = parse_verdicts(cut, "nvidia", truncated=True)
    assert found is not None and not found.complete
    assert [g.index for g in found.gpus] == ["0", "3"]


def test_the_digest_changes_with_the_answer():
    assert answer_digest(PAGE) == answer_digest(bytes(PAGE))
    assert answer_digest(PAGE) != answer_digest(PAGE.replace(b"b-1", b"b-2"))


def test_label_values_with_quotes_backslashes_and_newlines_read_back_as_written():
    from prometheus_client import generate_latest

    from exporters.gpu_health import verdict_families

    detail = 'XID 999: a "new" error\\path\nsecond line'
    item = Evidence("xid", "999", detail, HealthState.DEGRADED, HealthAction.NONE, 12.5, "0")

    class Families:
        def collect(self):
            return verdict_families([(["0"], GpuVerdict("0", evidence=(item,)))], ["gpu"], "b")

    (gpu,) = parse_verdicts(generate_latest(Families())).gpus
    assert gpu.evidence[0].detail == detail and gpu.evidence[0].at == 12.5


def test_the_clock_pattern_finds_the_time_in_todays_and_older_evidence():
    now = time.time()
    for at in (now, now - 3 * 86400):  # today: the time alone; before: with the date
        words = Evidence("dcgm", "xid:79", "XID 79", HealthState.UNHEALTHY,
                         HealthAction.REBOOT, at=at).words()  # fmt: skip
        assert CLOCK_IN_WORDS.sub(" at", words) == "XID 79 at", words


def test_each_gpus_minor_number_is_read_from_its_device_label():
    page = (
        b'mac_gpu_health{gpu="0",UUID="GPU-a",device="nvidia2",state="healthy",action="none"} 0\n'
        b'mac_gpu_health{gpu="1",UUID="GPU-b",device="nvidia0",state="healthy",action="none"} 0\n'
        b'mac_gpu_health{gpu="2",UUID="GPU-c",device="card1",state="healthy",action="none"} 0\n'
        b'mac_gpu_health{gpu="3",UUID="GPU-d",device="nvidia\xc2\xb2",state="healthy",'
        b'action="none"} 0\n'
        b'mac_gpu_health{gpu="4",UUID="GPU-e",state="healthy",action="none"} 0\n'
        b'mac_node_boot_info{boot_id="b"} 1\n'
    )
    found = parse_verdicts(page, "nvidia")
    # only "nvidia<digits>" is a minor: another name, a non-ASCII digit or none is unknown
    assert [(g.index, g.minor) for g in found.gpus] == [
        ("0", 2), ("1", 0), ("2", None), ("3", None), ("4", None),
    ]  # fmt: skip


def test_slurms_gpu_order_is_by_minor_number_and_none_where_it_cannot_be_told():
    from contract.verdicts import device_minor, slurm_gpu_order

    # NVML's GPUs 0, 1, 2 are /dev/nvidia2, /dev/nvidia0, /dev/nvidia1: Slurm's 0 is NVML's 1.
    assert slurm_gpu_order({0: 2, 1: 0, 2: 1}) == [1, 2, 0]
    assert slurm_gpu_order({0: 0, 1: None}) is None  # one unknown: Slurm's index as is
    assert slurm_gpu_order({0: 3, 1: 3}) is None  # two say the same
    assert [device_minor(d) for d in ("nvidia3", "nvidia-uvm", "card0", "nvidia\u00b2")] == [
        3, None, None, None
    ]  # fmt: skip


def test_a_gpus_fix_names_it_as_the_tools_take_it():
    """An NVIDIA GPU by its UUID (mac gpu reset and nvidia-smi -i take it, whatever the
    numbering), an AMD one by its index (amd-smi takes that only); the other vendor's
    line left out."""
    uuid = "GPU-5d2f7b1e-8c3a-4f6e-9b0d-2a7c1e4f8b93"
    nvidia = gpu_fix(HealthAction.RESET_GPU, "3", uuid)
    assert f"  sudo mac gpu reset {uuid}\n" in nvidia
    assert f"sudo nvidia-smi -r -i {uuid} " in nvidia
    assert "<gpu>" not in nvidia and "amd-smi" not in nvidia and "AMD: the index" not in nvidia
    amd = gpu_fix("reset_gpu", "5", "5fff74a1-0000-1000-80c3-2b1c0e9a7f3e", "amd")
    assert "  sudo mac gpu reset 5\n" in amd and "amd-smi reset --gpureset -g 5 " in amd
    assert "nvidia-smi -r" not in amd
    # An NVIDIA GPU named by its index (no UUID in NVML's form) keeps NVIDIA's line.
    by_index = gpu_fix("reset_gpu", "2", "", "nvidia")
    assert "sudo nvidia-smi -r -i 2 " in by_index and "amd-smi" not in by_index
    # Nothing says which vendor: both lines, each naming the index.
    unknown = gpu_fix("reset_gpu", "2", "")
    assert "sudo nvidia-smi -r -i 2 " in unknown and "amd-smi reset --gpureset -g 2 " in unknown
    assert gpu_fix(HealthAction.REBOOT, "3", uuid) == ACTION_FIXES[HealthAction.REBOOT]
    assert gpu_fix("replace_board", "3", uuid) == ""  # a later release's action
    assert reset_command("3", uuid) == f"sudo mac gpu reset {uuid}"


@pytest.mark.parametrize(
    "uuid", ["GPU-1;curl x|sh", "GPU-$(reboot)", "MIG-5d2f7b1e-8c3a-4f6e-9b0d-2a7c1e4f8b93", ""]
)
def test_a_uuid_that_is_not_nvmls_never_reaches_a_command(uuid):
    """The UUID is the node's word, read from its exporter's page: a person pastes the
    command into a root shell, so anything but NVML's form names the GPU by its index."""
    assert reset_command("3", uuid) == "sudo mac gpu reset 3"
    assert uuid not in gpu_fix(HealthAction.RESET_GPU, "3", uuid) or not uuid
    assert reset_command("3; reboot", uuid) == "sudo mac gpu reset <gpu>"
