"""Which node addresses the master agrees to probe, and how a request's source is found."""

from __future__ import annotations

import ipaddress

import pytest

from inventory.addresses import (
    AddressRefused,
    check_node_address,
    counted_address,
    source_address,
)
from inventory.models import Node

NO_ALLOWLIST: list = []

FORBIDDEN = [
    ("169.254.169.254", "metadata"),
    ("169.254.170.2", "metadata"),
    ("100.100.100.200", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "zone"),
    ("::ffff:169.254.169.254", "IPv4-mapped"),
    ("::ffff:10.0.0.1", "IPv4-mapped"),
    ("::ffff:a9fe:a9fe", "IPv4-mapped"),
    ("::169.254.169.254", "IPv4-compatible"),
    ("2002:a9fe:a9fe::1", "wraps 169.254.169.254"),
    ("64:ff9b::a9fe:a9fe", "wraps 169.254.169.254"),
    ("2001:0:4136:e378:8000:63bf:5601:5601", "wraps"),  # teredo, client 169.254.169.254... form
    ("0xa9fea9fe", "canonical"),
    ("2852039166", "canonical"),
    ("0251.0376.0251.0376", "canonical"),
    ("169.254.169.254.nip.io", "canonical"),
    ("169.254.43518", "canonical"),
    ("10.0.0.01", "canonical"),
    ("010.0.0.1", "canonical"),
    ("10.0.0.256", "valid IPv4"),
    (" 10.0.0.1", "whitespace"),
    ("10.0.0.1\n", "whitespace"),
    ("10.0.0.1/32", "canonical"),
    ("\u0661\u0660.0.0.1", "canonical"),  # Arabic-Indic digits
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("fec0::1", "site-local"),
    ("", "empty"),
    ("gpu-01", "canonical"),
    ("1:2:3:4:5:6:7:8:9", "valid IPv6"),
]


@pytest.mark.parametrize(("text", "reason"), FORBIDDEN, ids=[t for t, _ in FORBIDDEN])
def test_forbidden_address_forms_are_refused_with_a_reason(text, reason):
    with pytest.raises(AddressRefused) as caught:
        check_node_address(text, NO_ALLOWLIST)

    assert reason in str(caught.value)


def test_teredo_wrapping_a_forbidden_client_is_refused():
    # Teredo stores the client address inverted: ~169.254.169.254 = 86.1.86.1.
    teredo = ipaddress.IPv6Address("2001:0:4136:e378:8000:63bf:5601:5601")
    assert teredo.teredo[1] == ipaddress.IPv4Address("169.254.169.254")


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("10.0.0.1", "10.0.0.1"),
        ("192.168.1.20", "192.168.1.20"),
        ("127.0.0.1", "127.0.0.1"),  # simulated fleets and tests run on loopback
        ("127.3.0.9", "127.3.0.9"),
        ("::1", "::1"),
        ("198.18.0.2", "198.18.0.2"),
        ("2001:DB8:0:0::1", "2001:db8::1"),  # stored in canonical, compressed form
        ("fd12:3456::7", "fd12:3456::7"),
        ("8.8.8.8", "8.8.8.8"),
    ],
)
def test_ordinary_addresses_are_accepted_in_canonical_form(text, stored):
    assert check_node_address(text, NO_ALLOWLIST) == stored


def test_node_networks_narrow_the_allowed_addresses():
    allow = [ipaddress.ip_network("10.20.0.0/16"), ipaddress.ip_network("fd00:1::/64")]

    assert check_node_address("10.20.3.4", allow) == "10.20.3.4"
    assert check_node_address("fd00:1::9", allow) == "fd00:1::9"
    with pytest.raises(AddressRefused, match="outside MAC_NODE_NETWORKS"):
        check_node_address("10.21.0.1", allow)
    with pytest.raises(AddressRefused, match="metadata"):
        check_node_address("169.254.169.254", [ipaddress.ip_network("169.254.0.0/16")])


def test_source_address_unwraps_ipv4_mapped_peers():
    assert source_address({"REMOTE_ADDR": "::ffff:10.0.0.5"}, []) == "10.0.0.5"


def test_source_address_trusts_forwarded_for_only_from_proxies():
    proxies = [ipaddress.ip_network("10.250.0.0/16")]
    meta = {"REMOTE_ADDR": "10.250.0.1", "HTTP_X_FORWARDED_FOR": "169.254.169.254, 10.0.0.7"}

    assert source_address(meta, proxies) == "10.0.0.7"
    assert source_address({**meta, "REMOTE_ADDR": "10.0.0.3"}, proxies) == "10.0.0.3"
    assert source_address(meta, []) == "10.250.0.1"
    assert source_address({**meta, "HTTP_X_FORWARDED_FOR": "junk"}, proxies) == ""


# --- Through the API -------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("claimed", ["169.254.169.254", "::ffff:169.254.169.254", "0xa9fea9fe"])
def test_claimed_forbidden_address_answers_400_naming_ip(register, settings, claimed):
    settings.JOIN_TOKEN = "t0ken-for-address-tests"

    response = register("gpu-01", ip=claimed, token="t0ken-for-address-tests")

    assert response.status_code == 400
    assert list(response.json()) == ["ip"]
    assert "will not probe" in response.json()["ip"][0] or "canonical" in response.json()["ip"][0]
    assert not Node.objects.exists()


@pytest.mark.django_db
def test_forbidden_source_address_answers_400(register):
    response = register("gpu-01", remote="169.254.10.10")

    assert response.status_code == 400
    assert "link-local" in response.json()["ip"][0]


@pytest.mark.django_db
def test_node_networks_setting_applies_to_registration(register, settings):
    settings.NODE_NETWORKS = [ipaddress.ip_network("10.20.0.0/16")]

    refused = register("gpu-01", remote="10.0.0.5")
    accepted = register("gpu-02", remote="10.20.0.5")

    assert refused.status_code == 400
    assert "MAC_NODE_NETWORKS" in refused.json()["ip"][0]
    assert accepted.status_code == 201


@pytest.mark.parametrize(
    ("address", "counted"),
    [
        ("10.0.0.7", "10.0.0.7"),
        ("2001:db8:5:6:aaaa:bbbb:cccc:dddd", "2001:db8:5:6::"),
        ("2001:db8:5:6::1", "2001:db8:5:6::"),
        ("::ffff:10.0.0.7", "10.0.0.7"),  # an IPv4 peer of a dual-stack listener
        ("", ""),
    ],
)
def test_a_limit_counts_an_ipv6_client_by_its_64(address, counted):
    assert counted_address(address) == counted
