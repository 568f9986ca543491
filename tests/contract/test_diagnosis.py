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
    assert "sudo sysctl -p /etc/sysctl.d/99-mac-ipforward.conf" in fix
    assert "IPForward=yes" in fix and "IPv4Forwarding=yes" in fix
    assert "networkctl reconfigure" in fix


def test_ip_forward_fix_has_networkd_read_the_drop_in_before_reconfiguring():
    _, fix = describe(Diagnosis.IP_FORWARD_OFF)
    lines = [line.strip() for line in fix.splitlines()]
    dropin = "/etc/systemd/network/10-netplan-<iface>.network.d/mac-ipforward.conf"
    assert lines.count(f"printf '[Network]\\nIPForward=yes\\n' | sudo tee {dropin}") == 1
    reload, reconfigure = "sudo networkctl reload", "sudo networkctl reconfigure <iface>"
    assert lines.index(reload) + 1 == lines.index(reconfigure)


def test_service_down_fix_restarts_the_agent():
    assert "mac restart agent" in describe(Diagnosis.SERVICE_DOWN)[1]


def test_an_unknown_code_is_named_not_raised():
    text, fix = describe("bogus")
    assert "bogus" in text and fix == ""


# The guide's pattern, by the mode the agent registered with.
FORWARD_PATTERN = {"sys_exporter": Outcome.TIMEOUT, "nic_exporter": Outcome.OK}


def test_a_host_mode_node_whose_29101_times_out_while_29500_answers_has_a_blocked_port():
    assert diagnose(node(**FORWARD_PATTERN), "host") == Diagnosis.PORT_BLOCKED


def test_a_host_mode_node_is_never_diagnosed_with_ip_forward_off():
    patterns = [
        FORWARD_PATTERN,
        {**FORWARD_PATTERN, "dcgm_exporter": Outcome.TIMEOUT},
        {**FORWARD_PATTERN, "sw_exporter": Outcome.OK},
        {"sys_exporter": Outcome.TIMEOUT, "nic_exporter": Outcome.REFUSED},
    ]
    for outcomes in patterns:
        assert diagnose(node(**outcomes), "host") == Diagnosis.PORT_BLOCKED, outcomes


def test_a_host_mode_node_where_nothing_answers_is_down():
    silent = {"sys_exporter": Outcome.TIMEOUT, "nic_exporter": Outcome.TIMEOUT}
    assert diagnose(node(**silent), "host") == Diagnosis.HOST_DOWN


@pytest.mark.parametrize("network", ["bridge", ""])
def test_bridge_mode_and_agents_older_than_the_mode_keep_the_ip_forward_diagnosis(network):
    assert diagnose(node(**FORWARD_PATTERN), network) == Diagnosis.IP_FORWARD_OFF


@pytest.mark.parametrize("network", ["host", "bridge", ""])
def test_the_mode_changes_nothing_but_the_timeout_pattern(network):
    assert diagnose(node(sys_exporter=Outcome.OK), network) == Diagnosis.NONE
    assert diagnose(node(sys_exporter=Outcome.REFUSED), network) == Diagnosis.SERVICE_DOWN
    assert diagnose(node(sys_exporter=Outcome.BAD_BODY), network) == Diagnosis.EXPORTER_BROKEN


def test_the_port_blocked_text_rules_out_forwarding_and_names_the_checks():
    text, fix = describe(Diagnosis.PORT_BLOCKED)
    assert "host network" in text and "not an ip_forward problem" in text
    assert "curl" in fix and "127.0.0.1:29101/metrics" in fix
    assert "mac restart agent" in fix and "iptables" in fix
