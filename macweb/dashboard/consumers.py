"""The dashboard's live feed: a WebSocket that forwards each batch of node changes.

The sweep sends one message per sweep through inventory.live; this consumer only
relays it to the browser. Anonymous users are refused before the handshake
completes (close code 4401), so nothing about the fleet reaches them.
"""

from __future__ import annotations

import time

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from inventory import live

UNAUTHORISED = 4401  # the WebSocket mirror of HTTP 401
REJOIN_SECONDS = 3600  # well inside channels_redis' default group_expiry of a day
FRAME_KEY = "_dashboard_frame"  # the encoded frame, cached on the shared event


class FleetConsumer(AsyncJsonWebsocketConsumer):
    """One open dashboard page."""

    joined = False
    joined_at = 0.0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHORISED)
            return
        await live.join_dashboard(self.channel_layer, self.channel_name)
        self.joined = True
        self.joined_at = time.monotonic()
        await self.accept()
        await self.send_json({"type": "hello", "user": user.get_username()})

    async def disconnect(self, code: int) -> None:
        if self.joined:
            await live.leave_dashboard(self.channel_layer, self.channel_name)

    async def receive_json(self, content: dict, **kwargs) -> None:
        # The page only listens; its ping keeps proxies from closing an idle socket and
        # renews the group membership, which the Redis layer forgets after group_expiry
        # (a day): a wall screen stays open far longer than that.
        if isinstance(content, dict) and content.get("type") == "ping":
            if time.monotonic() - self.joined_at > REJOIN_SECONDS:
                await live.join_dashboard(self.channel_layer, self.channel_name)
                self.joined_at = time.monotonic()
            await self.send_json({"type": "pong"})

    async def nodes_changed(self, event: dict) -> None:
        """A batch from broadcast_node_changes(): one frame to the browser per batch.

        channels_redis hands the same event dict to every consumer of this process, so
        the frame is encoded once and kept on the event: 200 pages cost one json.dumps
        of a 500-node sweep, not 200.
        """
        frame = event.get(FRAME_KEY)
        if frame is None:
            frame = await self.encode_json(
                {
                    "type": "nodes.changed",
                    "changes": event["changes"],
                    "removed": event.get("removed", []),
                }
            )
            event[FRAME_KEY] = frame
        await self.send(text_data=frame)

    async def alerts_changed(self, event: dict) -> None:
        """The firing alerts from broadcast_alerts(), as they are (one small frame)."""
        await self.send_json({"type": "alerts.changed", "alerts": event["alerts"]})
