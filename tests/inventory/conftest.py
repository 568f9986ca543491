"""Fixtures of the inventory tests: a registering client, node factory, clean rate limits."""

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
    """Forget the rate-limit counters of earlier tests (only ours, in our own Redis db)."""
    from healthcheck.state import get_redis

    client = get_redis()
    prefix = settings.CACHES["default"].get("KEY_PREFIX", "")
    for key in client.scan_iter(match=f"{prefix}:*throttle_*register_*"):
        client.delete(key)
    yield
    client.close()


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


@pytest.fixture
def make_node():
    """Create a Node directly (state the test starts from, not the behaviour under test)."""
    from inventory.models import Node
    from inventory.services import hash_node_key, new_node_key

    counter = iter(range(1, 10_000))

    def _make(hostname=None, ip=None, *, key=None, **fields):
        n = next(counter)
        node_key_hash = new_node_key()[1] if key is None else hash_node_key(key)
        return Node.objects.create(
            hostname=hostname or f"node-{n:03d}",
            ip=ip or f"10.9.{n // 250}.{n % 250 + 1}",
            node_key_hash=node_key_hash,
            **fields,
        )

    return _make
