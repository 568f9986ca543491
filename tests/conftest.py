"""Fixtures shared by every test package: free ports, users, clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from testkit.simfleet import FleetThread, loopback_base


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("operator", password="operator-pass")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser("admin", "admin@example.com", "admin-pass")


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def auth_client(api_client, user):
    api_client.force_authenticate(user)
    return api_client


@pytest.fixture
def fleet() -> Iterator[Callable[..., FleetThread]]:
    """start_fleet(count, **kwargs) -> a running FleetThread, stopped after the test."""
    started: list[FleetThread] = []

    def start_fleet(count: int, **kwargs) -> FleetThread:
        kwargs.setdefault("base", loopback_base())
        runner = FleetThread(count, **kwargs).start()
        started.append(runner)
        return runner

    yield start_fleet
    for runner in started:
        runner.stop()
