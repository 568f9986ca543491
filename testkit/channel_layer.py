"""Reading a Channels layer in tests with a deadline that always ends the wait.

`asyncio.wait_for(layer.receive(channel), t)` and `asyncio.timeout(t)` end a wait by
cancelling the receive and then waiting for it to finish. On Python 3.11 that
cancellation can be lost: redis-py sends each command through its own
`asyncio.wait_for(..., socket_timeout)`, and 3.11's wait_for returns the result and
swallows a cancellation that arrives just as the send completes (CPython gh-86296,
fixed in 3.12). channels_redis's receive then goes on looping over 5 s BZPOPMINs, and
the test's wait, which waits for the cancelled receive to end, hangs until a message
comes or pytest's timeout fires (300 s in a CI run, issue 34).

`receive_within` keeps the deadline outside the receive: it waits with `asyncio.wait`,
which never cancels, and at the deadline cancels the receive again and again until it
has ended. A message that the receive took meanwhile is returned, never dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

# How long a cancelled receive gets to end before it is cancelled again.
RECANCEL = 0.05


async def within(awaitable: Awaitable[T], timeout: float) -> T:
    """The result of `awaitable`, or TimeoutError once `timeout` seconds passed.

    Unlike asyncio.wait_for, the wait ends even when the awaitable swallows a
    cancellation: it is cancelled until it has ended (each cancellation lands at a
    later await). Its result, if it finished anyway, is returned.
    """
    task = asyncio.ensure_future(awaitable)
    await asyncio.wait({task}, timeout=timeout)
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL)
    if task.cancelled():
        raise TimeoutError(f"nothing within {timeout} s")
    return task.result()


async def receive_within(layer, channel: str, timeout: float) -> dict:
    """The next message on `channel` of the Channels `layer`, or TimeoutError."""
    return await within(layer.receive(channel), timeout)
