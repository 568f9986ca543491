"""A bad registration setting is reported by `manage.py check`, naming the variable."""

from __future__ import annotations

import pytest

from inventory.checks import check_register_rate


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
