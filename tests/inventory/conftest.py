"""Fixtures of the inventory tests: a registering client and clean rate limits.

Nodes come from the shared `make_node` fixture (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """On SQLite, test in a real file: threads then share it through WAL and busy waits
    (the default in-memory test database locks threads out instead of waiting)."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        name = (db.get("TEST") or {}).get("NAME") or "test_inventory"
        if not Path(str(name)).is_absolute():
            db.setdefault("TEST", {})["NAME"] = str(Path(settings.DATA_DIR) / f"{name}.sqlite3")


@pytest.fixture(autouse=True)
def _fresh_rate_limits(settings):
    """Forget the rate-limit counters of earlier tests, registration's and the node
    events' (only ours, in our own Redis db)."""
    from healthcheck.state import get_redis

    client = get_redis()
    prefix = settings.CACHES["default"].get("KEY_PREFIX", "")
    for key in client.scan_iter(match=f"{prefix}:*throttle_*"):
        client.delete(key)
    yield
    client.close()


@pytest.fixture(autouse=True)
def _no_queued_pushes():
    """Send what earlier tests queued for the dashboards (inventory.live holds changes
    for a moment) before this test's dashboard joins, and this test's after it left."""
    from inventory.live import flush_node_changes

    flush_node_changes()
    yield
    flush_node_changes()


@pytest.fixture
def register(api_client):
    """POST /api/v1/register as an agent at `remote`, with optional token and node key.

    Keyword arguments named HTTP_* are request headers; the others are body fields.
    """

    def _register(hostname="gpu-01", *, remote="10.0.0.1", token=None, key=None, **fields):
        headers = {"REMOTE_ADDR": remote}
        if token is not None:
            headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        if key is not None:
            headers["HTTP_X_MAC_NODE_KEY"] = key
        headers.update({k: fields.pop(k) for k in list(fields) if k.startswith("HTTP_")})
        body = {"hostname": hostname, **fields}
        return api_client.post("/api/v1/register", body, format="json", **headers)

    return _register
