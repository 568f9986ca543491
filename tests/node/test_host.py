"""The host's roots: one shape for every place MAC reads /proc, /sys, /dev and the rest."""

from __future__ import annotations

from pathlib import Path

from node.host import DefaultRoute, Roots, default_route
from tests.node.checks.standins import ROUTE_HEAD, routes


def test_the_defaults_are_the_host_itself():
    roots = Roots()
    assert roots.proc("mounts") == Path("/proc/mounts")
    assert roots.host("/etc/os-release") == Path("/etc/os-release")
    assert roots.host_path("/etc/os-release") == "/etc/os-release"


def test_in_a_container_each_host_path_is_read_under_its_root():
    roots = Roots("/host/sys", "/host/proc", "/dev", "/host/root")
    assert roots.host("/proc/sys/net/ipv4/ip_forward") == Path("/host/proc/sys/net/ipv4/ip_forward")
    assert roots.host("/sys/class/net") == Path("/host/sys/class/net")
    assert roots.host("/etc/mango/mac/env") == Path("/host/root/etc/mango/mac/env")
    assert roots.host("/var/log/journal") == Path("/host/root/var/log/journal")
    assert roots.host("/procedure") == Path("/host/root/procedure")  # not under /proc
    # And back: what a printed fix must name on the host.
    assert roots.host_path("/host/root/etc/sysctl.conf") == "/etc/sysctl.conf"
    assert roots.host_path("/host/proc/sys") == "/proc/sys"
    assert roots.host_path("/host/root") == "/"


def test_a_folder_moved_on_its_own_wins_over_rootfs(tmp_path):
    roots = Roots(etc_root=str(tmp_path / "etc"), usr_root=str(tmp_path / "usr"))
    assert roots.host("/etc/sysctl.d/99-mac.conf") == tmp_path / "etc/sysctl.d/99-mac.conf"
    assert roots.host("/usr/lib/systemd") == tmp_path / "usr/lib/systemd"
    assert roots.host("/run/systemd") == Path("/run/systemd")
    assert roots.host_path(tmp_path / "etc" / "hosts") == "/etc/hosts"
    assert roots.host_path("/elsewhere/x") == "/elsewhere/x"


def test_the_default_route_is_the_lowest_metric_one_that_is_up_with_its_gateway():
    text = routes(
        ("eth1", "0.0.0.0", "10.0.0.1", 200),
        ("eth0", "0.0.0.0", "172.18.0.1", 0),
        ("eth0", "172.18.0.0", "0.0.0.0", 0),
    )
    assert default_route(text) == DefaultRoute("eth0", "172.18.0.1")
    assert default_route(routes(("eth0", "172.18.0.0", "0.0.0.0", 0))) is None
    assert default_route(ROUTE_HEAD + "eth0\tzz\n") is None
    # A point-to-point default route has no gateway: the interface, and no address.
    assert default_route(routes(("ppp0", "0.0.0.0", "0.0.0.0", 0))) == DefaultRoute("ppp0", "")
