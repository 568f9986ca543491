"""Only the master's own pages may open the live socket (issue 11, security defect 4).

A logged-in operator's browser sends the session cookie with a WebSocket opened by any
site's page; the Origin check is what keeps a hostile page off the live feed. Driven
through the real ASGI application with a real session and the Redis channel layer.
"""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections
from django.test import Client

from macweb.asgi import application
from macweb.routing import origin_allowed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
async def close_thread_connections():
    yield
    await sync_to_async(connections.close_all)()


@pytest.fixture
def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


async def handshake(cookie: str, host: str, origin: str | None) -> bool:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    comm = WebsocketCommunicator(application, "/ws/fleet/", headers=headers)
    connected, _ = await comm.connect(timeout=10)
    await comm.disconnect()
    return connected


async def test_it_accepts_the_page_the_master_served(session_cookie, settings):
    settings.ALLOWED_HOSTS, settings.ALLOWED_ORIGINS = ["*"], []

    assert await handshake(session_cookie, "mac.example:28080", "http://mac.example:28080")


@pytest.mark.parametrize(
    "origin",
    ["https://evil.example", "http://mac.example:8080", "http://mac.example.evil:28080", None,
     "null", "file://"],
)  # fmt: skip
async def test_it_refuses_a_foreign_page_with_a_valid_session(session_cookie, settings, origin):
    settings.ALLOWED_HOSTS, settings.ALLOWED_ORIGINS = ["*"], []

    assert not await handshake(session_cookie, "mac.example:28080", origin)


async def test_allowed_origins_decide_when_set(session_cookie, settings):
    settings.ALLOWED_HOSTS = ["*"]
    settings.ALLOWED_ORIGINS = ["https://dash.example"]

    assert await handshake(session_cookie, "10.0.0.1:28080", "https://dash.example")
    assert not await handshake(session_cookie, "10.0.0.1:28080", "http://10.0.0.1:28080")


async def test_allowed_hosts_decide_when_they_name_hosts(session_cookie, settings):
    settings.ALLOWED_HOSTS, settings.ALLOWED_ORIGINS = [".example.org"], []

    assert await handshake(session_cookie, "mac.example.org", "https://mac.example.org")
    assert await handshake(session_cookie, "mac.example.org:8443", "https://mac.example.org:8443")
    assert not await handshake(session_cookie, "mac.example.org", "https://evil.example")
    # A host the master does not answer to, even as the socket's own.
    assert not await handshake(session_cookie, "evil.example", "https://evil.example")


@pytest.mark.parametrize(
    "origin",
    ["http://mac.example.org:9090", "http://mac.example.org:9093", "https://gpu-7.example.org"],
)
async def test_another_port_or_host_of_the_masters_names_is_another_site(
    session_cookie, settings, origin
):
    """Prometheus' UI on :9090, Alertmanager's on :9093, a node's page under the same
    domain: each is a host the master answers to, none is the page the master served."""
    settings.ALLOWED_HOSTS, settings.ALLOWED_ORIGINS = [".example.org"], []

    assert not await handshake(session_cookie, "mac.example.org:28080", origin)
    assert await handshake(session_cookie, "mac.example.org:28080", "http://mac.example.org:28080")


@pytest.mark.parametrize(
    ("origin", "host", "allowed"),
    [
        ("http://mac.example", "mac.example", True),
        ("http://mac.example", "mac.example:80", True),
        ("https://mac.example", "mac.example", True),
        ("https://mac.example", "mac.example:80", False),
        ("http://MAC.example:28080", "mac.EXAMPLE:28080", True),
        ("http://[::1]:28080", "[::1]:28080", True),
        ("http://127.0.0.1:28080", "localhost:28080", False),
        ("javascript:alert(1)", "mac.example", False),
        ("http://mac.example:99999", "mac.example", False),
    ],
)
def test_same_origin_rules(settings, origin, host, allowed):
    settings.ALLOWED_HOSTS, settings.ALLOWED_ORIGINS = ["*"], []

    assert origin_allowed(origin, host) is allowed
