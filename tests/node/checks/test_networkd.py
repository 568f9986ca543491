"""The networkd check: the primary link, the .network file networkd uses, the key by version.

networkctl, ip and systemctl answer from recorded outputs here; the same check under a
real systemd-networkd is tests/maccli/test_nspawn_systemd.py.
"""

from __future__ import annotations

from pathlib import Path

from contract.diagnosis import describe
from contract.outcomes import Diagnosis
from node.checks import CheckContext, CheckStatus
from node.checks.fixes import MakeDirs, Run, WriteFile
from node.checks.networkd import (
    check_ip_forward_networkd,
    parse_default_route,
    parse_networkctl_list,
    primary_interface,
)
from node.runner import CommandResult
from tests.node.checks.scratch import scratch_context, write

ROUTE = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "enp65s0f1\t00000000\t0101A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n"
    "enp65s0f0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
    "enp65s0f0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n"
)
NETPLAN = "[Match]\nName=enp65s0f0\n\n[Network]\nDHCP=yes\n"
STATUS = """\u25cf 2: enp65s0f0
                     Link File: /usr/lib/systemd/network/99-default.link
                  Network File: /run/systemd/network/10-netplan-enp65s0f0.network
                         State: routable (configured)
"""
LIST = """  1 lo        loopback carrier  unmanaged
  2 enp65s0f0 ether    routable  configured
  3 ibp1s0    infiniband off    unmanaged
"""


def _ctx(tmp_path: Path, answers: dict | None = None, version: int | None = 252) -> CheckContext:
    answers = {("systemctl", "is-active"): CommandResult(0, "active\n"), **(answers or {})}

    def run(argv):
        return answers.get(tuple(argv[:2]), CommandResult(127, "", f"{argv[0]}: not found"))

    return scratch_context(tmp_path, run, version)


def _netplan_node(tmp_path: Path) -> None:
    write(tmp_path / "proc/net/route", ROUTE)
    write(tmp_path / "run/systemd/network/10-netplan-enp65s0f0.network", NETPLAN)


def test_the_primary_link_is_the_lowest_metric_default_route():
    assert parse_default_route(ROUTE) == "enp65s0f0"
    assert parse_default_route(ROUTE.splitlines()[0]) is None
    assert parse_networkctl_list(LIST) == "enp65s0f0"


def test_without_proc_net_route_ip_route_then_networkctl_list_tell(tmp_path):
    ip = {("ip", "route"): CommandResult(0, "default via 10.0.0.1 dev eno1 proto dhcp\n")}
    assert primary_interface(_ctx(tmp_path, ip)) == "eno1"
    listed = {("networkctl", "list"): CommandResult(0, LIST)}
    assert primary_interface(_ctx(tmp_path, listed)) == "enp65s0f0"


def test_a_missing_drop_in_fails_with_ipforward_before_256_and_reload_then_reconfigure(tmp_path):
    _netplan_node(tmp_path)
    result = check_ip_forward_networkd(_ctx(tmp_path, version=252))
    assert result.status == CheckStatus.FAIL
    assert "enp65s0f0 (/run/systemd/network/10-netplan-enp65s0f0.network)" in result.detail
    dropin = "/etc/systemd/network/10-netplan-enp65s0f0.network.d"
    assert result.steps == (
        MakeDirs(dropin),
        WriteFile(f"{dropin}/mac-ipforward.conf", "[Network]\nIPForward=yes\n"),
        Run(("networkctl", "reload")),
        Run(("networkctl", "reconfigure", "enp65s0f0")),
    )
    assert result.fix.splitlines() == [
        f"sudo mkdir -p {dropin}",
        f"printf '[Network]\\nIPForward=yes\\n' | sudo tee {dropin}/mac-ipforward.conf",
        "sudo networkctl reload",
        "sudo networkctl reconfigure enp65s0f0",
    ]


def test_the_masters_fix_text_gives_doctors_drop_in_commands(tmp_path):
    """The offline node's fix on the master and `mac doctor` on it: the same drop-in, the
    same commands, reload before reconfigure (the master names the link <iface>)."""
    _netplan_node(tmp_path)
    doctor = check_ip_forward_networkd(_ctx(tmp_path, version=252)).fix.splitlines()
    _, master = describe(Diagnosis.IP_FORWARD_OFF)
    lines = [line.strip().replace("<iface>", "enp65s0f0") for line in master.splitlines()]
    start = lines.index(doctor[0])
    assert lines[start : start + len(doctor)] == doctor


def test_the_drop_in_makes_it_pass(tmp_path):
    _netplan_node(tmp_path)
    write(
        tmp_path / "etc/systemd/network/10-netplan-enp65s0f0.network.d/mac-ipforward.conf",
        "[Network]\nIPForward=yes\n",
    )
    result = check_ip_forward_networkd(_ctx(tmp_path, version=255))
    assert result.status == CheckStatus.PASS and "IPForward=yes for enp65s0f0" in result.detail


def test_networkctl_status_names_the_file_even_in_usr_lib(tmp_path):
    # A container's host0 is configured by a file shipped in /usr/lib (no [Match] needed here).
    write(tmp_path / "proc/net/route", ROUTE)
    write(tmp_path / "usr/lib/systemd/network/80-vendor.network", "[Network]\nDHCP=yes\n")
    status = STATUS.replace(
        "/run/systemd/network/10-netplan-enp65s0f0.network",
        "/usr/lib/systemd/network/80-vendor.network",
    )
    result = check_ip_forward_networkd(
        _ctx(tmp_path, {("networkctl", "status"): CommandResult(0, status)})
    )
    assert result.status == CheckStatus.FAIL
    assert result.steps[0] == MakeDirs("/etc/systemd/network/80-vendor.network.d")


def test_systemd_256_needs_ipv4forwarding_and_says_ipforward_was_replaced(tmp_path):
    _netplan_node(tmp_path)
    dropin = tmp_path / "etc/systemd/network/10-netplan-enp65s0f0.network.d/mac-ipforward.conf"
    write(dropin, "[Network]\nIPForward=yes\n")
    result = check_ip_forward_networkd(_ctx(tmp_path, version=256))
    assert result.status == CheckStatus.FAIL
    assert "IPv4Forwarding=yes" in result.fix and "replaced" in result.detail
    write(dropin, "[Network]\nIPv4Forwarding=yes\n")
    assert check_ip_forward_networkd(_ctx(tmp_path, version=256)).status == CheckStatus.PASS


def test_systemd_256_global_networkd_conf_counts(tmp_path):
    _netplan_node(tmp_path)
    write(tmp_path / "etc/systemd/networkd.conf", "[Network]\nIPv4Forwarding=yes\n")
    assert check_ip_forward_networkd(_ctx(tmp_path, version=257)).status == CheckStatus.PASS


def test_the_version_comes_from_systemctl_else_networkctl(tmp_path):
    _netplan_node(tmp_path)
    answers = {("networkctl", "--version"): CommandResult(0, "systemd 256 (256.7-1)\n+PAM\n")}
    result = check_ip_forward_networkd(_ctx(tmp_path, answers, version=None))
    assert result.status == CheckStatus.FAIL and "systemd 256" in result.detail
    assert "IPv4Forwarding=yes" in result.fix


def test_it_skips_where_networkd_does_not_run_or_manage_the_link(tmp_path):
    assert check_ip_forward_networkd(_ctx(tmp_path)).status == CheckStatus.SKIP
    _netplan_node(tmp_path)
    inactive = {("systemctl", "is-active"): CommandResult(3, "inactive\n")}
    result = check_ip_forward_networkd(_ctx(tmp_path, inactive))
    assert result.status == CheckStatus.SKIP and "inactive" in result.detail
    unmanaged = STATUS.replace("/run/systemd/network/10-netplan-enp65s0f0.network", "n/a")
    result = check_ip_forward_networkd(
        _ctx(tmp_path, {("networkctl", "status"): CommandResult(0, unmanaged)})
    )
    assert result.status == CheckStatus.SKIP and "does not manage enp65s0f0" in result.detail
