"""MAC's Redis broker transport: kombu's, with one guard that keeps the worker alive.

Why: when Redis restarts while the worker holds an unacknowledged message, Celery's
consumer first *collects* its broker connection (kombu's Connection.collect detaches
the transport: ``transport.client = None``) and then closes it. Closing the channel
restores the unacked message, which builds a new Redis pool from
``transport.client.hostname``; with the client already gone that raises
``AttributeError: 'NoneType' object has no attribute 'hostname'``. Celery only ignores
connection errors there, so the AttributeError ends the worker ("Unrecoverable
error"), and sweeps stop for good (issue 11, fault 1; reproduced with kombu 5.7 and
celery 5.7, on about one Redis restart in three).

The guard turns that case into what it is, a lost connection: a
``redis.ConnectionError``, which Celery ignores before it reconnects. The message it
could not restore stays in kombu's unacked index in Redis (restored after the
visibility timeout); for the sweep that is moot anyway, since its message expires
within one interval and beat sends the next one (healthcheck.tasks).

Selected with ``broker_transport`` in macweb/celery.py; the broker URL stays redis://.

Upstream: the same failure, kombu using the transport's client after
``Connection.collect()`` dropped it, is celery/kombu#582 (closing a channel) and
celery/kombu#970 (restoring unacked messages at shutdown); both were closed with fixes
for their own paths, and the restore-on-close path still fails in kombu 5.7 (the same
traceback from a current kombu: digitalfabrik/opendrift-leeway-webgui#119). No kombu
issue tracks this path yet.

When it can go: once a kombu release treats a collected connection as a lost one here.
To check a new kombu: remove ``broker_transport`` from macweb/celery.py and run
tests/healthcheck/test_redis_restart.py (Redis restarted during sweeps, many times);
if the worker survives every restart, delete this module. The override touches only
``_connparams``, kombu's private method: pyproject pins kombu below 6 for that reason.
"""

from __future__ import annotations

import redis
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict:
        # The channel already closed (an ack arriving after the reset), or its
        # connection already collected: either way the connection is gone.
        if self.connection is None or self.connection.client is None:
            raise redis.ConnectionError("the broker connection was already collected; reconnecting")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel
