"""The dashboard's live feed: a WebSocket that forwards each batch of node changes.

The sweep sends one message per sweep through inventory.live; this consumer relays it
to the browser, adding only the fix of a node whose fix names its GPUs (a summary has
codes, and the page's vocabulary the fixes with `<gpu>` in them). Anonymous users are
refused before the handshake completes (close code 4401), so nothing about the fleet
reaches them; a page whose session ends while it is open (a logout, an expiry, a
deactivated account or a changed password) is closed with the same code at its next
ping after RECHECK_SECONDS.
"""

from __future__ import annotations

import asyncio
import logging
import time
from importlib import import_module
from types import SimpleNamespace

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user

from contract.verdicts import names_gpus
from inventory import live
from macweb.dashboard import queries

log = logging.getLogger(__name__)

UNAUTHORISED = 4401  # the WebSocket mirror of HTTP 401
REJOIN_SECONDS = 3600  # well inside channels_redis' default group_expiry of a day
FRAME_KEY = "_dashboard_frame"  # the encoded frame (its task), cached on the shared event
# How often a page's session is read again (at a ping, every 25 s): a session store read
# per open page a minute, and a page logged out elsewhere gets at most this long.
RECHECK_SECONDS = 60.0


class FleetConsumer(AsyncJsonWebsocketConsumer):
    """One open dashboard page."""

    joined = False
    joined_at = 0.0
    checked_at = 0.0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHORISED)
            return
        await live.join_dashboard(self.channel_layer, self.channel_name)
        self.joined = True
        self.joined_at = self.checked_at = time.monotonic()
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
            if time.monotonic() - self.checked_at >= RECHECK_SECONDS:
                if not await self._still_signed_in():
                    await self.close(code=UNAUTHORISED)
                    return
                self.checked_at = time.monotonic()
            if time.monotonic() - self.joined_at > REJOIN_SECONDS:
                await live.join_dashboard(self.channel_layer, self.channel_name)
                self.joined_at = time.monotonic()
            await self.send_json({"type": "pong"})

    @database_sync_to_async
    def _still_signed_in(self) -> bool:
        """The session read afresh from its store, as a request would read it: Django's
        get_user refuses an ended session, an inactive user and a changed password."""
        key = getattr(self.scope.get("session"), "session_key", None)
        if not key:
            return False
        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
        return get_user(SimpleNamespace(session=store)).is_authenticated

    async def nodes_changed(self, event: dict) -> None:
        """A batch from broadcast_node_changes(): one frame to the browser per batch.

        channels_redis hands the same event dict to every consumer of this process, so
        the frame is built once and kept on the event (as the task that builds it: the
        pages that get the event while it reads the database wait for the same one):
        200 pages cost one read and one json.dumps of a 500-node sweep, not 200.
        """
        frame = event.get(FRAME_KEY)
        if frame is None:
            frame = event[FRAME_KEY] = asyncio.ensure_future(self._frame(event))
        # Shielded: a page that closes while it waits must not cancel the others' frame.
        await self.send(text_data=await asyncio.shield(frame))

    async def _frame(self, event: dict) -> str:
        """The batch as the browser gets it: a node whose fix names GPUs (reset_gpu) comes
        with that fix (`health_fix`), which the summary has no room for."""
        changes = event["changes"]
        try:
            if any(names_gpus(change.get("health_action", "")) for change in changes):
                changes = await database_sync_to_async(queries.with_health_fixes)(changes)
        except Exception:
            # Any failure, not only the database's (InterfaceError is none of its errors, and
            # a bug is a bug): this task is every page's of the process, and one error here
            # would fail them all. The page then shows the vocabulary's fix, `<gpu>` and
            # all: late, not lost.
            log.warning("could not read the GPUs named in the fixes of a push", exc_info=True)
        return await self.encode_json(
            {"type": "nodes.changed", "changes": changes, "removed": event.get("removed", [])}
        )

    async def alerts_changed(self, event: dict) -> None:
        """The firing alerts from broadcast_alerts(), as they are (one small frame)."""
        await self.send_json({"type": "alerts.changed", "alerts": event["alerts"]})
