"""Password logins are throttled per client address (issue 11, security defect 6).

Real requests through Django's middleware and the admin's own login view, counted by
django-axes in the test database.
"""

from __future__ import annotations

import ipaddress

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

ADMIN_LOGIN = "/admin/login/?next=/admin/"


@pytest.fixture
def limits(settings):
    settings.AXES_FAILURE_LIMIT = 3
    return settings


def attempt(password: str, remote: str = "10.0.0.7", path: str = ADMIN_LOGIN, **headers):
    client = Client()
    response = client.post(
        path, {"username": "admin", "password": password}, REMOTE_ADDR=remote, **headers
    )
    return client, response


def test_it_refuses_logins_after_the_failure_limit_with_a_clear_message(staff, limits):
    answers = [attempt("wrong")[1].status_code for _ in range(3)]
    _, locked = attempt("admin-pass")  # even the right password, for a while

    assert answers == [200, 200, 429]  # the failure that reaches the limit is refused
    assert locked.status_code == 429
    text = locked.content.decode()
    assert "Too many failed logins from 10.0.0.7" in text
    assert "MAC_LOGIN_FAILURE_LIMIT" in text
    assert "try again in 15 minute(s)" in text
    assert int(locked["Retry-After"]) == 15 * 60


def test_other_addresses_can_still_log_in(staff, limits):
    for _ in range(4):
        attempt("wrong", remote="10.0.0.7")

    client, response = attempt("admin-pass", remote="10.0.0.8")

    assert response.status_code == 302
    assert client.get("/admin/").status_code == 200


def test_a_success_before_the_limit_resets_the_count(staff, limits):
    attempt("wrong")
    attempt("wrong")
    attempt("admin-pass")

    _, response = attempt("wrong")
    _, again = attempt("admin-pass")

    assert response.status_code == 200
    assert again.status_code == 302


def test_the_dashboard_login_is_throttled_too(staff, limits):
    for _ in range(3):
        attempt("wrong", path="/accounts/login/")

    _, response = attempt("admin-pass", path="/accounts/login/")

    assert response.status_code == 429


def test_it_counts_the_address_mac_believes_not_a_forged_header(staff, limits):
    limits.TRUSTED_PROXIES = [ipaddress.ip_network("10.250.0.0/16")]
    for n in range(3):
        attempt("wrong", remote="10.0.0.7", HTTP_X_FORWARDED_FOR=f"10.1.1.{n}")

    _, response = attempt("admin-pass", remote="10.0.0.7", HTTP_X_FORWARDED_FOR="10.1.1.99")

    assert response.status_code == 429
    assert "10.0.0.7" in response.content.decode()


def test_it_cools_off(staff, limits):
    from datetime import timedelta

    from axes.models import AccessAttempt
    from django.db.models import F

    limits.AXES_COOLOFF_TIME = timedelta(minutes=1)
    for _ in range(3):
        attempt("wrong")
    assert attempt("admin-pass")[1].status_code == 429

    # A minute passes for the failures (a login takes seconds on a loaded machine, so a
    # real sleep against a short cool-off would race it).
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=1, seconds=1))

    assert attempt("admin-pass")[1].status_code == 302


def test_an_ipv6_client_is_counted_by_its_64(staff, limits):
    # A client with a /64 could take a new address for each guess.
    for n in range(3):
        attempt("wrong", remote=f"2001:db8:5:6::{n + 1}")

    _, locked = attempt("admin-pass", remote="2001:db8:5:6:aaaa::99")

    assert locked.status_code == 429
    text = locked.content.decode()
    assert "Too many failed logins from 2001:db8:5:6::/64" in text
    assert "axes_reset_ip 2001:db8:5:6::`" in text
    # Another /64 is another client.
    _, other = attempt("admin-pass", remote="2001:db8:5:7::1")
    assert other.status_code == 302
