"""The one way live changes reach the dashboard: a batched message to one Channels group.

Nothing else in MAC knows the group's name or the message type.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

DASHBOARD_GROUP = "mac.dashboard"
MESSAGE_TYPE = "nodes.changed"  # handled by a consumer method named nodes_changed


def broadcast_node_changes(changes: list[dict], removed: Iterable[int] = ()) -> None:
    """Send one message carrying every changed node's summary (see Node.summary())
    and the ids of nodes that left the inventory.

    A Redis hiccup must not fail the sweep that called us: the page resynchronises
    on reconnect, so a lost push is logged, not raised.
    """
    removed = sorted(removed)
    if not changes and not removed:
        return
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": MESSAGE_TYPE, "changes": changes, "removed": removed}
    try:
        async_to_sync(layer.group_send)(DASHBOARD_GROUP, message)
    except Exception:  # pragma: no cover - depends on Redis being down
        log.warning("could not push %d node changes to the dashboard", len(changes), exc_info=True)


async def join_dashboard(channel_layer, channel_name: str) -> None:
    """Subscribe one dashboard WebSocket to the live feed (called by its consumer)."""
    await channel_layer.group_add(DASHBOARD_GROUP, channel_name)


async def leave_dashboard(channel_layer, channel_name: str) -> None:
    """Unsubscribe a dashboard WebSocket that closed."""
    await channel_layer.group_discard(DASHBOARD_GROUP, channel_name)
