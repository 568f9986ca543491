"""Fixtures shared by every test package: users, clients, nodes, a simulated fleet."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from testkit import factories
from testkit.simfleet import FleetThread, loopback_base

if TYPE_CHECKING:
    from inventory.models import Node


def pytest_sessionstart(session: pytest.Session) -> None:
    """The data and static folders, made the way `mac start master` makes them.

    The settings create nothing; without the static folder every request handler
    (some built while collecting) would warn that it is missing. The key comes from
    the environment (pyproject's pytest `env`), so no key file is written.
    """
    from django.core.management import call_command

    call_command("prepare_master", verbosity=0)


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
def make_node() -> Callable[..., Node]:
    """make_node(hostname=None, ip=None, *, key=None, **fields) -> a saved Node.

    The state a test starts from, not the behaviour under test: see testkit.factories.
    """
    return factories.make_node


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
