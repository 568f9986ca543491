"""A node that dies, comes back and dies again is paged as fast the second time (issue 31).

Every process real: `mac start master` (process runtime: gunicorn, Celery worker and
beat, Debian's Prometheus and Alertmanager), a simulated node on loopback, a webhook
receiver as the one channel. MAC_PROBE_INTERVAL=5, every other setting at its default:
the top route's group_interval stays 5 minutes, which once held back the second
death's page for that long; the node route's own (MAC_ALERT_NODE_GROUP_INTERVAL, the
probe interval) sends it within a sweep.

The Redis database holds a post record of a master that used it before (under the
prefix every master used before installation ids): this master must not take it for
its own and end that master's alert.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.cache.backends.redis import RedisCache

from alerting.nodealerts import POSTED_KEY
from testkit.alerting import WebhookReceiver
from testkit.alertstack import AlertStack
from testkit.simfleet import FleetThread, loopback_base, register_fleet
from testkit.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
        reason="Debian's prometheus and prometheus-alertmanager are needed",
    ),
]

PROBE_INTERVAL = 5
WITHIN = 15.0  # seconds from a death (or a recovery) to its notification
# The second death, 30 s after the first resolution (the case): past the node
# route's group_interval (the probe interval), far inside the top route's 5 minutes that
# once held it back.
AGAIN_AFTER = 30.0
GHOST = "gpu-of-the-previous-master"


@pytest.fixture(scope="module")
def flapping(tmp_path_factory) -> Iterator[tuple[AlertStack, FleetThread, WebhookReceiver]]:
    previous = RedisCache(settings.REDIS_URL, {"KEY_PREFIX": "mac"})
    previous.set(POSTED_KEY, {1: GHOST, 2: GHOST}, 3600)
    webhook = WebhookReceiver()
    fleet = FleetThread(1, base=loopback_base()).start()
    master = AlertStack(
        Path(tmp_path_factory.mktemp("flap-master")),
        {"MAC_PROBE_INTERVAL": str(PROBE_INTERVAL), "MAC_ALERT_WEBHOOK_URL": webhook.url},
    )
    try:
        master.start()
        registered, errors = asyncio.run(register_fleet(fleet.fleet, master.url))
        assert registered == 1 and not errors
        host = fleet.nodes[0].hostname
        wait_for(lambda: master.node_up().get(host) == 1.0, timeout=60, what="the node Online")
        yield master, fleet, webhook
    finally:
        master.stop()
        fleet.stop()
        webhook.close()
        previous.delete(POSTED_KEY)


def _notifications(webhook: WebhookReceiver, host: str, status: str) -> list:
    return webhook.matching(
        lambda body: any(
            a["labels"].get("hostname") == host and a["status"] == status for a in body["alerts"]
        )
    )


def _seconds_to(webhook: WebhookReceiver, host: str, status: str, count: int, since: float):
    """Seconds from `since` to the `count`-th `status` notification about `host`."""
    [*_, latest] = wait_for(
        lambda: (sent := _notifications(webhook, host, status))[count - 1 :] and sent,
        timeout=60,
        interval=0.2,
        what=f"{status} notification #{count} for {host}",
    )
    return latest.received_at - since, latest.received_at


def test_a_node_that_dies_again_is_paged_as_fast_as_the_first_time(flapping):
    _master, fleet, webhook = flapping
    host = fleet.nodes[0].hostname
    took = {}
    for death in (1, 2):
        fleet.set_node_mode(0, "refuse")
        took[f"death {death}"], _ = _seconds_to(webhook, host, "firing", death, time.time())
        fleet.set_node_mode(0, "answer")
        took[f"back {death}"], resolved_at = _seconds_to(
            webhook, host, "resolved", death, time.time()
        )
        if death == 1:
            time.sleep(max(0.0, resolved_at + AGAIN_AFTER - time.time()))

    assert all(seconds <= WITHIN for seconds in took.values()), took
    time.sleep(2 * PROBE_INTERVAL)  # nothing more comes: one page per change
    assert len(_notifications(webhook, host, "firing")) == 2
    assert len(_notifications(webhook, host, "resolved")) == 2
    # The previous master's record was never taken for this one's: no alert of its ended.
    assert not _notifications(webhook, GHOST, "resolved")
    assert not _notifications(webhook, GHOST, "firing")
