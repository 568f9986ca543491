"""Fixtures shared by every test package: free ports, users, clients."""

from __future__ import annotations

import socket

import pytest


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (tests start real servers on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


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
