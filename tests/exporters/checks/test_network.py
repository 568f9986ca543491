"""ip_forward now, in sysctl.d, and in systemd-networkd drop-ins (keyed on the systemd version)."""

from __future__ import annotations

from pathlib import Path

from exporters.checks import CheckContext, CheckStatus
from exporters.checks.network import (
    check_ip_forward,
    check_ip_forward_persisted,
    check_networkd_forwarding,
)
from node.commands import CommandResult


def _ctx(tmp_path: Path, version: int | None = 252, networkd: str = "active") -> CheckContext:
    def run(argv):
        if argv[:2] == ["systemctl", "is-active"]:
            return CommandResult(0 if networkd == "active" else 3, networkd + "\n")
        return CommandResult(1, "", "unexpected")

    extra = {"run": run, "run_root": str(tmp_path / "run"), "usr_root": str(tmp_path / "usr")}
    if version is not None:
        extra["systemd_version"] = version
    return CheckContext(
        proc_root=str(tmp_path / "proc"), etc_root=str(tmp_path / "etc"), extra=extra
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_ip_forward_off_fails_with_the_sysctl_command(tmp_path):
    _write(tmp_path / "proc/sys/net/ipv4/ip_forward", "0\n")
    result = check_ip_forward(_ctx(tmp_path))
    assert result.status == CheckStatus.FAIL
    assert "net.ipv4.ip_forward = 0" in result.detail and "29500" in result.detail
    assert result.fix == "sudo sysctl -w net.ipv4.ip_forward=1"


def test_ip_forward_on_passes(tmp_path):
    _write(tmp_path / "proc/sys/net/ipv4/ip_forward", "1\n")
    assert check_ip_forward(_ctx(tmp_path)).status == CheckStatus.PASS


def test_not_persisted_fails_with_the_sysctl_d_file(tmp_path):
    _write(tmp_path / "etc/sysctl.d/10-other.conf", "vm.swappiness = 10\n")
    result = check_ip_forward_persisted(_ctx(tmp_path))
    assert result.status == CheckStatus.FAIL
    assert "echo 'net.ipv4.ip_forward = 1' | sudo tee /etc/sysctl.d/99-mac-ipforward.conf" in (
        result.fix
    )
    assert "sudo sysctl --system" in result.fix


def test_persisted_passes_and_a_later_file_setting_zero_wins(tmp_path):
    _write(tmp_path / "etc/sysctl.d/99-mac-ipforward.conf", "net.ipv4.ip_forward = 1\n")
    assert check_ip_forward_persisted(_ctx(tmp_path)).status == CheckStatus.PASS
    # /etc/sysctl.conf is read last by `sysctl --system`.
    _write(tmp_path / "etc/sysctl.conf", "net/ipv4/ip_forward=0\n")
    result = check_ip_forward_persisted(_ctx(tmp_path))
    assert result.status == CheckStatus.FAIL
    assert "sysctl.conf sets net.ipv4.ip_forward = 0" in result.detail


def test_same_name_in_etc_masks_usr_lib(tmp_path):
    _write(tmp_path / "usr/lib/sysctl.d/50-fwd.conf", "net.ipv4.ip_forward = 1\n")
    _write(tmp_path / "etc/sysctl.d/50-fwd.conf", "net.ipv4.ip_forward = 0\n")
    assert check_ip_forward_persisted(_ctx(tmp_path)).status == CheckStatus.FAIL


NETPLAN = "[Match]\nName=enp65s0f0\n\n[Network]\nDHCP=yes\n"


def test_networkd_without_drop_in_fails_with_ipforward_before_256(tmp_path):
    _write(tmp_path / "run/systemd/network/10-netplan-enp65s0f0.network", NETPLAN)
    result = check_networkd_forwarding(_ctx(tmp_path, version=252))
    assert result.status == CheckStatus.FAIL
    dropin = "/etc/systemd/network/10-netplan-enp65s0f0.network.d"
    assert f"sudo mkdir -p {dropin}" in result.fix
    assert f"printf '[Network]\\nIPForward=yes\\n' | sudo tee {dropin}/ipforward.conf" in result.fix
    assert "sudo networkctl reconfigure enp65s0f0" in result.fix


def test_networkd_drop_in_with_ipforward_passes_before_256(tmp_path):
    _write(tmp_path / "run/systemd/network/10-netplan-enp65s0f0.network", NETPLAN)
    _write(
        tmp_path / "etc/systemd/network/10-netplan-enp65s0f0.network.d/ipforward.conf",
        "[Network]\nIPForward=yes\n",
    )
    assert check_networkd_forwarding(_ctx(tmp_path, version=255)).status == CheckStatus.PASS


def test_systemd_256_needs_ipv4forwarding(tmp_path):
    _write(tmp_path / "etc/systemd/network/20-eth.network", "[Match]\nName=eth0\n")
    dropin = tmp_path / "etc/systemd/network/20-eth.network.d/ipforward.conf"
    _write(dropin, "[Network]\nIPForward=yes\n")
    result = check_networkd_forwarding(_ctx(tmp_path, version=256))
    assert result.status == CheckStatus.FAIL
    assert "IPv4Forwarding=yes" in result.fix and "replaced" in result.detail
    _write(dropin, "[Network]\nIPv4Forwarding=yes\n")
    assert check_networkd_forwarding(_ctx(tmp_path, version=256)).status == CheckStatus.PASS


def test_systemd_256_global_networkd_conf_counts(tmp_path):
    _write(tmp_path / "etc/systemd/network/20-eth.network", "[Match]\nName=eth0\n")
    _write(tmp_path / "etc/systemd/networkd.conf", "[Network]\nIPv4Forwarding=yes\n")
    assert check_networkd_forwarding(_ctx(tmp_path, version=257)).status == CheckStatus.PASS


def test_networkd_skips_without_managed_links_or_when_inactive(tmp_path):
    assert check_networkd_forwarding(_ctx(tmp_path)).status == CheckStatus.SKIP
    _write(tmp_path / "etc/systemd/network/20-eth.network", "[Match]\nName=eth0\n")
    result = check_networkd_forwarding(_ctx(tmp_path, networkd="inactive"))
    assert result.status == CheckStatus.SKIP and "inactive" in result.detail


def test_systemd_version_comes_from_systemctl(tmp_path):
    _write(tmp_path / "etc/systemd/network/20-eth.network", "[Match]\nName=eth0\n")
    ctx = _ctx(tmp_path, version=None)

    def run(argv):
        if argv == ["systemctl", "--version"]:
            return CommandResult(0, "systemd 256 (256.7-1)\n+PAM +AUDIT\n")
        return CommandResult(0, "active\n")

    ctx.extra["run"] = run
    result = check_networkd_forwarding(ctx)
    assert result.status == CheckStatus.FAIL and "systemd 256" in result.detail
    assert "IPv4Forwarding=yes" in result.fix


def _ctx_with_nat(tmp_path: Path, nat_rules: str) -> CheckContext:
    """A node whose `iptables -t nat -S` prints nat_rules."""

    def run(argv):
        if argv[:3] == ["iptables", "-t", "nat"]:
            return CommandResult(0, nat_rules)
        return CommandResult(1, "", "unexpected")

    return CheckContext(
        proc_root=str(tmp_path / "proc"),
        etc_root=str(tmp_path / "etc"),
        extra={"run": run, "run_root": str(tmp_path / "run"), "usr_root": str(tmp_path / "usr")},
    )


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
    _write(tmp_path / "proc/sys/net/ipv4/ip_forward", "0\n")
    result = check_ip_forward(_ctx_with_nat(tmp_path, DOCKER_NAT))
    assert result.status == CheckStatus.FAIL
    assert "unreachable from the master" in result.detail
    persisted = check_ip_forward_persisted(_ctx_with_nat(tmp_path, DOCKER_NAT))
    assert persisted.status == CheckStatus.FAIL


def test_forwarding_off_only_warns_where_no_exporter_port_is_dnatted(tmp_path):
    _write(tmp_path / "proc/sys/net/ipv4/ip_forward", "0\n")
    result = check_ip_forward(_ctx_with_nat(tmp_path, UNRELATED_NAT))
    assert result.status == CheckStatus.WARN
    assert "no exporter port is DNAT'd" in result.detail
    assert result.fix == "sudo sysctl -w net.ipv4.ip_forward=1"
    persisted = check_ip_forward_persisted(_ctx_with_nat(tmp_path, UNRELATED_NAT))
    assert persisted.status == CheckStatus.WARN
    assert "sysctl.d" in persisted.fix
