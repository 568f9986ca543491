"""Per-node keys: random at first registration, only their sha256 stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from inventory.models import Node


def hash_node_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_node_key() -> tuple[str, str]:
    """A fresh (key, sha256 hex) pair; the key is shown once, the hash is stored."""
    key = secrets.token_urlsafe(32)
    return key, hash_node_key(key)


def node_key_matches(node: Node, key: str | None) -> bool:
    """Constant-time check of a presented key against the node's stored hash."""
    if not key or not node.node_key_hash:
        return False
    return hmac.compare_digest(hash_node_key(key), node.node_key_hash)


def node_for_key(key: str | None) -> Node | None:
    """The node whose key this is, or None (GET /api/v1/self)."""
    if not key:
        return None
    node = Node.objects.filter(node_key_hash=hash_node_key(key)).first()
    # The lookup is by hash (indexed); compare again in constant time for good measure.
    return node if node is not None and node_key_matches(node, key) else None
