"""testkit.channel_layer: a wait on the Channels layer always ends at its deadline.

The CI run of issue 34 hung 300 s in test_live_pushes's `dashboard.nothing()`: the
receive, cancelled by asyncio.wait_for at its deadline, lost that cancellation (on
Python 3.11 redis-py's own wait_for around each send can swallow it) and went on
waiting for a message that never came, and wait_for waited for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from channels.layers import get_channel_layer

from testkit.channel_layer import receive_within, within

pytestmark = pytest.mark.timeout(60)


async def _loses_one_cancellation(then: asyncio.Future) -> object:
    """A receive that swallows the first cancellation, as channels_redis's does when
    3.11's wait_for inside redis-py returns a finished send instead of raising, and
    then waits on (its loop of BZPOPMINs) for `then`."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(3600)
    return await then


def test_a_wait_on_a_receive_that_swallows_its_cancellation_ends_at_the_deadline():
    async def both() -> tuple[bool, float]:
        never = asyncio.get_running_loop().create_future()
        # asyncio.wait_for waits for the cancelled receive to end: still waiting after 1 s.
        plain = asyncio.ensure_future(asyncio.wait_for(_loses_one_cancellation(never), 0.1))
        await asyncio.wait({plain}, timeout=1)
        hung = not plain.done()
        never.cancel()  # lets it end
        await asyncio.wait({plain})

        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await within(_loses_one_cancellation(asyncio.Future()), 0.1)
        return hung, time.monotonic() - started

    hung, took = asyncio.run(both())
    assert hung
    assert took < 1


def test_what_the_receive_took_while_being_cancelled_is_returned_not_dropped():
    async def late() -> object:
        arrived = asyncio.get_running_loop().create_future()
        arrived.set_result({"type": "nodes.changed"})
        return await within(_loses_one_cancellation(arrived), 0.05)

    assert asyncio.run(late()) == {"type": "nodes.changed"}


def test_waits_on_the_real_layer_end_and_lose_no_message():
    """Many short waits on an idle channel of the real Redis layer, each cancelled at
    a different moment of the receive's Redis round trips: every one ends, and the
    message sent afterwards still arrives."""
    layer = get_channel_layer()
    with asyncio.Runner() as runner:
        channel = runner.run(layer.new_channel())
        for attempt in range(40):
            timeout = attempt * 0.001
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                runner.run(receive_within(layer, channel, timeout))
            assert time.monotonic() - started < timeout + 2

        runner.run(layer.send(channel, {"type": "nodes.changed", "n": 1}))
        assert runner.run(receive_within(layer, channel, 5)) == {"type": "nodes.changed", "n": 1}
