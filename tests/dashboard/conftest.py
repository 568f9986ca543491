"""Fixtures of the dashboard tests: logged-in browsers-to-be and node factories."""

from __future__ import annotations

import pytest
from django.test import Client


@pytest.fixture
def client_user(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def client_staff(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client
