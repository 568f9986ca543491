"""ip_forward now and in sysctl.d: the checks, and the steps their fixes are made of."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.checks import CheckContext, CheckStatus
from node.checks.fixes import ApplySysctlFile, SetSysctl, SetSysctlInFile, WriteFile
from node.checks.network import (
    check_ip_forward,
    check_ip_forward_persisted,
    netns_differs,
    parse_snmp_forwarding,
)
from node.host import Roots
from node.runner import CommandResult
from testkit.macenv import own_files
from tests.node.checks.scratch import scratch_context, snmp, write


def _ctx(tmp_path: Path, version: int | None = 252, networkd: str = "active") -> CheckContext:
    def run(argv):
        if argv[:2] == ["systemctl", "is-active"]:
            return CommandResult(0 if networkd == "active" else 3, networkd + "\n")
        return CommandResult(1, "", "unexpected")

    return scratch_context(tmp_path, run, version)


def test_ip_forward_off_fails_with_the_sysctl_command(tmp_path):
    write(tmp_path / "proc/sys/net/ipv4/ip_forward", "0\n")
    result = check_ip_forward(_ctx(tmp_path))
    assert result.status == CheckStatus.FAIL
    assert "net.ipv4.ip_forward = 0" in result.detail and "29500" in result.detail
    assert result.steps == (SetSysctl("net.ipv4.ip_forward", "1"),)
    assert result.fix == "sudo sysctl -w net.ipv4.ip_forward=1"


def test_ip_forward_on_passes(tmp_path):
    write(tmp_path / "proc/sys/net/ipv4/ip_forward", "1\n")
    assert check_ip_forward(_ctx(tmp_path)).status == CheckStatus.PASS


def test_not_persisted_fails_with_the_sysctl_d_file(tmp_path):
    write(tmp_path / "etc/sysctl.d/10-other.conf", "vm.swappiness = 10\n")
    result = check_ip_forward_persisted(_ctx(tmp_path))
    assert result.status == CheckStatus.FAIL
    # The host's path, not the scratch root's: the fix is for the operator on the node.
    assert result.steps == (
        WriteFile("/etc/sysctl.d/99-mac-ipforward.conf", "net.ipv4.ip_forward = 1\n"),
        ApplySysctlFile("/etc/sysctl.d/99-mac-ipforward.conf"),
    )
    # Only MAC's file is applied: `sysctl --system` would re-apply every file of the host.
    assert result.fix.splitlines() == [
        "echo 'net.ipv4.ip_forward = 1' | sudo tee /etc/sysctl.d/99-mac-ipforward.conf",
        "sudo sysctl -p /etc/sysctl.d/99-mac-ipforward.conf",
    ]


def test_persisted_passes_and_a_later_file_setting_zero_wins(tmp_path):
    write(tmp_path / "etc/sysctl.d/99-mac-ipforward.conf", "net.ipv4.ip_forward = 1\n")
    assert check_ip_forward_persisted(_ctx(tmp_path)).status == CheckStatus.PASS
    # /etc/sysctl.conf is read last by `sysctl --system`.
    write(tmp_path / "etc/sysctl.conf", "net/ipv4/ip_forward=0\n")
    result = check_ip_forward_persisted(_ctx(tmp_path))
    assert result.status == CheckStatus.FAIL
    assert "/etc/sysctl.conf sets net.ipv4.ip_forward = 0" in result.detail
    [edit, apply] = result.steps
    assert edit == SetSysctlInFile("/etc/sysctl.conf", "net.ipv4.ip_forward", "1")
    assert apply == ApplySysctlFile("/etc/sysctl.conf")  # the file it changed, alone
    assert result.fix.splitlines()[0] == (
        "sudo sed -i 's/^[[:space:]]*net.ipv4.ip_forward[[:space:]]*=.*/"
        "net.ipv4.ip_forward = 1/' /etc/sysctl.conf"
    )


def test_same_name_in_etc_masks_usr_lib(tmp_path):
    write(tmp_path / "usr/lib/sysctl.d/50-fwd.conf", "net.ipv4.ip_forward = 1\n")
    write(tmp_path / "etc/sysctl.d/50-fwd.conf", "net.ipv4.ip_forward = 0\n")
    assert check_ip_forward_persisted(_ctx(tmp_path)).status == CheckStatus.FAIL


def _ctx_with_nat(tmp_path: Path, nat_rules: str) -> CheckContext:
    """A node whose `iptables -t nat -S` prints nat_rules."""

    def run(argv):
        if argv[:3] == ["iptables", "-t", "nat"]:
            return CommandResult(0, nat_rules)
        return CommandResult(1, "", "unexpected")

    return scratch_context(tmp_path, run)


DOCKER_NAT = """-P PREROUTING ACCEPT
-N DOCKER
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A DOCKER ! -i docker0 -p tcp -m tcp --dport 29101 -j DNAT --to-destination 172.17.0.2:29101
-A DOCKER ! -i docker0 -p tcp -m tcp --dport 29150 -j DNAT --to-destination 172.17.0.3:29150
"""
UNRELATED_NAT = """-P PREROUTING ACCEPT
-A PREROUTING -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.0.0.9:80
"""


def test_forwarding_off_fails_where_docker_dnats_the_exporter_ports(tmp_path):
    write(tmp_path / "proc/sys/net/ipv4/ip_forward", "0\n")
    result = check_ip_forward(_ctx_with_nat(tmp_path, DOCKER_NAT))
    assert result.status == CheckStatus.FAIL
    assert "unreachable from the master" in result.detail
    persisted = check_ip_forward_persisted(_ctx_with_nat(tmp_path, DOCKER_NAT))
    assert persisted.status == CheckStatus.FAIL


def _with_config(ctx: CheckContext, tmp_path: Path, **values: str) -> CheckContext:
    from node.config import NodeConfig

    ctx.extra["config"] = NodeConfig.load({**own_files(tmp_path), **values})
    return ctx


def test_forwarding_off_only_warns_where_no_exporter_port_is_dnatted(tmp_path):
    # A node registered by an older mac, no mode written: its Docker agent runs bridge.
    write(tmp_path / "proc/sys/net/ipv4/ip_forward", "0\n")
    registered = {"MAC_NODE_KEY": "k" * 43}
    result = check_ip_forward(_with_config(_ctx_with_nat(tmp_path, UNRELATED_NAT), tmp_path,
                                           **registered))  # fmt: skip
    assert result.status == CheckStatus.WARN
    assert "no exporter port is DNAT'd" in result.detail
    assert result.fix == "sudo sysctl -w net.ipv4.ip_forward=1"
    persisted = check_ip_forward_persisted(
        _with_config(_ctx_with_nat(tmp_path, UNRELATED_NAT), tmp_path, **registered)
    )
    assert persisted.status == CheckStatus.WARN
    assert "sysctl.d" in persisted.fix


def test_forwarding_off_is_not_a_problem_on_a_new_install(tmp_path):
    """No mode chosen and never registered: `mac start agent` will run host mode, so
    doctor --fix must not offer to make the node a router (it warned before)."""
    write(tmp_path / "proc/sys/net/ipv4/ip_forward", "0\n")
    ctx = _with_config(_ctx_with_nat(tmp_path, UNRELATED_NAT), tmp_path)

    now, persisted = check_ip_forward(ctx), check_ip_forward_persisted(ctx)

    assert (now.status, persisted.status) == (CheckStatus.SKIP, CheckStatus.SKIP)
    assert "no mode is chosen yet" in now.detail and "will need it" not in now.detail


def test_forwarding_off_is_not_a_problem_in_host_mode(tmp_path):
    from node.config import NodeConfig

    write(tmp_path / "proc/sys/net/ipv4/ip_forward", "0\n")
    ctx = _ctx_with_nat(tmp_path, UNRELATED_NAT)
    ctx.extra["config"] = NodeConfig.load({**own_files(tmp_path), "MAC_AGENT_NETWORK": "host"})

    now, persisted = check_ip_forward(ctx), check_ip_forward_persisted(ctx)

    assert (now.status, persisted.status) == (CheckStatus.SKIP, CheckStatus.SKIP)
    assert "MAC_AGENT_NETWORK=host" in now.detail
    assert "will need it" not in now.detail


def test_host_mode_with_exporter_ports_still_dnatted_fails(tmp_path):
    # Bridge containers left running beside a host-mode setting still need forwarding.
    from node.config import NodeConfig

    write(tmp_path / "proc/sys/net/ipv4/ip_forward", "0\n")
    ctx = _ctx_with_nat(tmp_path, DOCKER_NAT)
    ctx.extra["config"] = NodeConfig.load({**own_files(tmp_path), "MAC_AGENT_NETWORK": "host"})

    assert check_ip_forward(ctx).status == CheckStatus.FAIL


# --- a network namespace of its own (sys-manager in bridge mode) --------------------------


def _bridge_ctx(tmp_path: Path, own: str, host: str, nat_rules: str = DOCKER_NAT) -> CheckContext:
    """sys-manager on the bridge: its own namespace's flag is `own`, the host's pid 1's
    snmp says `host` (1 on, 2 off)."""
    write(tmp_path / "proc/sys/net/ipv4/ip_forward", f"{own}\n")
    write(tmp_path / "proc/1/net/snmp", snmp(host))
    ctx = _ctx_with_nat(tmp_path, nat_rules)
    ctx.extra["netns_of_its_own"] = True
    return ctx


def test_snmp_forwarding_is_1_on_and_2_off_and_anything_else_says_what_is_wrong():
    assert parse_snmp_forwarding(snmp("1")) == 1
    assert parse_snmp_forwarding(snmp("2")) == 0
    for text, said in [
        ("", "no Ip: header"),
        ("Ip: Forwarding DefaultTTL\n", "no Ip: header"),
        ("Ip: DefaultTTL InReceives\nIp: 64 1\n", "no Forwarding"),
        ("Ip: Forwarding DefaultTTL\nIp: 1\n", "no Forwarding"),
        (snmp("0"), r"Forwarding '0', not 1 \(on\) or 2 \(off\)"),
    ]:
        with pytest.raises(ValueError, match=said):
            parse_snmp_forwarding(text)


def test_in_a_namespace_of_its_own_the_check_reads_the_hosts_flag_not_its_own(tmp_path):
    off = check_ip_forward(_bridge_ctx(tmp_path, own="1", host="2"))
    assert off.status == CheckStatus.FAIL
    assert off.detail.startswith("net.ipv4.ip_forward = 0 (the host's, from /proc/1/net/snmp)")
    assert off.fix == "sudo sysctl -w net.ipv4.ip_forward=1"
    on = check_ip_forward(_bridge_ctx(tmp_path, own="0", host="1"))
    assert on.status == CheckStatus.PASS


def test_in_a_namespace_of_its_own_its_nat_rules_are_not_the_nodes(tmp_path):
    # Its own namespace DNATs nothing; the node's bridge exporters still need forwarding.
    result = check_ip_forward(_bridge_ctx(tmp_path, own="0", host="2", nat_rules=UNRELATED_NAT))
    assert result.status == CheckStatus.FAIL
    assert "unreachable from the master" in result.detail


def test_an_unreadable_or_garbled_flag_skips_with_the_reason(tmp_path):
    ctx = _bridge_ctx(tmp_path, own="1", host="1")
    (tmp_path / "proc/1/net/snmp").unlink()
    missing = check_ip_forward(ctx)
    assert missing.status == CheckStatus.SKIP
    assert missing.detail == f"cannot read {tmp_path}/proc/1/net/snmp: No such file or directory"
    write(tmp_path / "proc/1/net/snmp", "Ip: Forwarding DefaultTTL\nIp:\n")
    garbled = check_ip_forward(ctx)
    assert garbled.status == CheckStatus.SKIP and "no Forwarding value" in garbled.detail
    write(tmp_path / "proc/sys/net/ipv4/ip_forward", "yes\n")
    ctx.extra["netns_of_its_own"] = False
    own = check_ip_forward(ctx)
    assert own.status == CheckStatus.SKIP and "holds 'yes', not 0 or 1" in own.detail


def test_namespaces_differ_when_the_kernel_shows_pid_1_in_another(tmp_path):
    roots = Roots(proc_root=str(tmp_path / "proc"))
    assert netns_differs(roots) is None  # pid 1's link unreadable: cannot tell
    (tmp_path / "proc/self/ns").mkdir(parents=True)
    (tmp_path / "proc/1/ns").mkdir(parents=True)
    (tmp_path / "proc/self/ns/net").symlink_to("net:[4026532301]")
    (tmp_path / "proc/1/ns/net").symlink_to("net:[4026531833]")
    assert netns_differs(roots) is True
    (tmp_path / "proc/self/ns/net").unlink()
    (tmp_path / "proc/self/ns/net").symlink_to("net:[4026531833]")
    assert netns_differs(roots) is False
