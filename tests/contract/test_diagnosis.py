"""Diagnosis: what the pattern of answers says about an offline node, and how to fix it."""

from __future__ import annotations

import pytest

from contract.diagnosis import describe, diagnose
from contract.liveness import NodeProbe, ProbeResult
from contract.outcomes import Outcome
from inventory.choices import Diagnosis


def node(**outcomes: Outcome) -> NodeProbe:
    probe = NodeProbe(1, "198.18.0.2")
    for name, outcome in outcomes.items():
        service = name.replace("_", "-")
        probe.results[service] = ProbeResult(service, outcome)
    return probe


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ({"sys_exporter": Outcome.OK, "nic_exporter": Outcome.TIMEOUT}, Diagnosis.NONE),
        ({"sys_exporter": Outcome.TIMEOUT, "nic_exporter": Outcome.OK}, Diagnosis.IP_FORWARD_OFF),
        # Every bridge exporter times out while the host network answers.
        (
            {
                "sys_exporter": Outcome.TIMEOUT,
                "dcgm_exporter": Outcome.TIMEOUT,
                "nic_exporter": Outcome.OK,
            },
            Diagnosis.IP_FORWARD_OFF,
        ),
        # Another bridge exporter answers: forwarding works, sys-exporter hangs.
        (
            {
                "sys_exporter": Outcome.TIMEOUT,
                "sw_exporter": Outcome.OK,
                "nic_exporter": Outcome.OK,
            },
            Diagnosis.EXPORTER_BROKEN,
        ),
        ({"sys_exporter": Outcome.REFUSED, "nic_exporter": Outcome.OK}, Diagnosis.SERVICE_DOWN),
        (
            {"sys_exporter": Outcome.REFUSED, "nic_exporter": Outcome.REFUSED},
            Diagnosis.SERVICE_DOWN,
        ),
        ({"sys_exporter": Outcome.TIMEOUT, "nic_exporter": Outcome.TIMEOUT}, Diagnosis.HOST_DOWN),
        (
            {"sys_exporter": Outcome.UNREACHABLE, "nic_exporter": Outcome.UNREACHABLE},
            Diagnosis.HOST_DOWN,
        ),
        (
            {"sys_exporter": Outcome.HTTP_STATUS, "nic_exporter": Outcome.OK},
            Diagnosis.EXPORTER_BROKEN,
        ),
        ({"sys_exporter": Outcome.BAD_BODY, "nic_exporter": Outcome.OK}, Diagnosis.EXPORTER_BROKEN),
    ],
)
def test_it_reads_the_cause_off_the_probe_pattern(outcomes, expected):
    assert diagnose(node(**outcomes)) == expected


def test_every_diagnosis_has_a_description_and_all_but_none_a_fix():
    for code in Diagnosis.values:
        text, fix = describe(code)
        if code:
            assert text and fix, code
        else:
            assert (text, fix) == ("", "")


def test_ip_forward_fix_gives_the_exact_commands():
    text, fix = describe(Diagnosis.IP_FORWARD_OFF)
    assert "net.ipv4.ip_forward" in text
    assert "sudo sysctl -w net.ipv4.ip_forward=1" in fix
    assert "/etc/sysctl.d/99-mac-ipforward.conf" in fix
    assert "sudo sysctl --system" in fix
    assert "IPForward=yes" in fix and "IPv4Forwarding=yes" in fix
    assert "networkctl reconfigure" in fix


def test_service_down_fix_restarts_the_agent():
    assert "mac restart agent" in describe(Diagnosis.SERVICE_DOWN)[1]


def test_an_unknown_code_is_named_not_raised():
    text, fix = describe("bogus")
    assert "bogus" in text and fix == ""
