"""The one way live changes reach the dashboard: a batched message to one Channels group.

Nothing else in MAC knows the group's name or the message type.

`broadcast_node_changes` sends at once (the sweep: one message per sweep).
`broadcast_alerts` sends the firing alerts the Alertmanager poller (alerting.tasks)
saw change, on the same group.
`queue_node_changes` is for the inventory's service layer, which changes one node
per request: a burst of 1,000 agents joining made 1,000 messages, each a Redis round
trip on the request's thread and a frame to every open page. Queued changes are held
for PUSH_WINDOW_SECONDS and sent as one message, the latest summary of each node;
nothing queued is dropped (the rest is sent when the process exits).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

DASHBOARD_GROUP = "mac.dashboard"
MESSAGE_TYPE = "nodes.changed"  # handled by a consumer method named nodes_changed
ALERTS_MESSAGE_TYPE = "alerts.changed"  # handled by a consumer method named alerts_changed
# Long enough to gather a burst of joins, short enough that a page still looks live.
PUSH_WINDOW_SECONDS = 0.2


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


def broadcast_alerts(snapshot: dict) -> None:
    """Send the fleet's firing alerts (alerting.queries.AlertSnapshot.as_dict()) to
    every open dashboard: the poller of Alertmanager calls this when they change.

    The same group as the node changes, so a page has one socket; like them, a lost
    push is logged, and the page rereads the alerts when its socket reopens.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            DASHBOARD_GROUP, {"type": ALERTS_MESSAGE_TYPE, "alerts": snapshot}
        )
    except Exception:  # pragma: no cover - depends on Redis being down
        log.warning("could not push the firing alerts to the dashboard", exc_info=True)


class _PushBuffer:
    """Changes waiting to be sent, merged by node id; one sender thread per process.

    Sending holds `_sending`, so two flushes (the thread's and an explicit one) never
    overtake each other: a page always gets a node's summaries in the order they were
    taken.
    """

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._sending = threading.Lock()
        self._changes: dict[int, dict] = {}
        self._removed: set[int] = set()
        self._thread: threading.Thread | None = None

    def add(self, changes: Iterable[dict], removed: Iterable[int]) -> None:
        with self._lock:
            for change in changes:
                self._removed.discard(change["id"])
                self._changes.pop(change["id"], None)  # keeps the dict in arrival order
                self._changes[change["id"]] = change
            for node_id in removed:
                self._changes.pop(node_id, None)
                self._removed.add(node_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mac-live-push", daemon=True)
                self._thread.start()
            self._lock.notify()

    def flush(self) -> None:
        """Send everything queued so far, now, in one message."""
        with self._sending:
            with self._lock:
                changes, removed = list(self._changes.values()), self._removed
                self._changes, self._removed = {}, set()
            broadcast_node_changes(changes, removed)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not (self._changes or self._removed):
                    self._lock.wait()
            time.sleep(PUSH_WINDOW_SECONDS)  # let the rest of the burst arrive
            self.flush()


_buffer = _PushBuffer()


def queue_node_changes(changes: list[dict], removed: Iterable[int] = ()) -> None:
    """Send these changes (summaries as in broadcast_node_changes) within
    PUSH_WINDOW_SECONDS, in one message with whatever else changed meanwhile."""
    _buffer.add(changes, removed)


def flush_node_changes() -> None:
    """Send the queued changes now (at exit, and for tests that must not wait)."""
    _buffer.flush()


def _forget_in_child() -> None:
    # A forked child has no sender thread; what the parent queued is the parent's to send.
    global _buffer
    _buffer = _PushBuffer()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(flush_node_changes)


async def join_dashboard(channel_layer, channel_name: str) -> None:
    """Subscribe one dashboard WebSocket to the live feed (called by its consumer)."""
    await channel_layer.group_add(DASHBOARD_GROUP, channel_name)


async def leave_dashboard(channel_layer, channel_name: str) -> None:
    """Unsubscribe a dashboard WebSocket that closed."""
    await channel_layer.group_discard(DASHBOARD_GROUP, channel_name)
