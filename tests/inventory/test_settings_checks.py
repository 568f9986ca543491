"""A bad registration setting is reported by `manage.py check`, naming the variable."""

from __future__ import annotations

import ipaddress

import pytest
from django.core import checks

from inventory.checks import check_register_rate, check_trusted_proxies


@pytest.mark.parametrize("rate", ["600/min", "20/s", "10000/hour", "1/day"])
def test_valid_rates_pass(settings, rate):
    settings.REGISTER_RATE = rate
    assert check_register_rate() == []


@pytest.mark.parametrize("rate", ["600", "600/minutes", "0/min", "fast", "-1/s"])
def test_it_names_a_bad_register_rate(settings, rate):
    settings.REGISTER_RATE = rate

    errors = check_register_rate()

    assert [e.id for e in errors] == ["inventory.E001"]
    assert "MAC_REGISTER_RATE" in errors[0].msg


@pytest.mark.django_db
def test_it_warns_of_registered_nodes_inside_the_trusted_proxies(settings, make_node):
    for index in range(1, 6):
        make_node(f"gpu-{index:02d}", f"10.7.0.{index}")
    make_node("proxy-neighbour", "10.8.0.1")
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.7.0.0/16"), ipaddress.ip_network("::1")]

    [warning] = check_trusted_proxies(databases=["default"])

    assert warning.id == "inventory.W001" and warning.level == checks.WARNING
    assert warning.msg.startswith("MAC_TRUSTED_PROXIES=10.7.0.0/16,::1/128 holds the address")
    assert "5 registered node(s) (gpu-01 at 10.7.0.1, gpu-02 at 10.7.0.2" in warning.msg
    assert "and 2 more" in warning.msg and "proxy-neighbour" not in warning.msg
    # migrate runs the database's checks at every start: this one is among them.
    assert warning in checks.run_checks(databases=["default"], tags=[checks.Tags.database])


@pytest.mark.django_db
def test_proxies_apart_from_the_nodes_need_no_warning(settings, make_node):
    make_node("gpu-01", "10.7.0.1")
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.1.2.3")]
    assert check_trusted_proxies(databases=["default"]) == []
    settings.TRUSTED_PROXIES = []
    assert check_trusted_proxies(databases=["default"]) == []


def test_without_a_database_the_check_stays_quiet(settings):
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/8")]
    assert check_trusted_proxies(databases=None) == []
