"""Signal receivers: the inventory's maintenance changes become silence updates at once.

The inventory sends `maintenance_changed` after the change commits (it cannot import
this app). The silences are updated by a Celery task, so the admin's or the API's
request never waits on Alertmanager; beat's poll puts right whatever this misses.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.dispatch import receiver

from alerting import bulkheads
from alerting.tasks import sync_silences
from contract.redact import url_without_credentials
from inventory.signals import maintenance_changed

log = logging.getLogger(__name__)


@receiver(maintenance_changed, dispatch_uid="alerting.silences")
def update_silences(sender, node_ids: list[int], **kwargs) -> str:
    """Queue the silence update; "" when queued, else why not and what follows (in words).

    The publish is bounded (the broker's socket timeouts and publish retry policy in
    macweb.settings, and the broker bulkhead), so the request that made the change
    never waits on a hung Redis for long; beat's next poll reconciles every silence.
    """
    try:
        with bulkheads.BROKER.slot():
            sync_silences.delay(list(node_ids))
    except Exception as exc:
        log.warning("could not queue the silence update for nodes %s: %s", node_ids, exc)
        return (
            f"the silence update was not queued ({_reason(exc)}); the change is saved, and "
            f"MAC's next poll of Alertmanager (every {settings.ALERT_POLL_INTERVAL:g} s, once "
            "the broker answers) applies it"
        )
    return ""


def _reason(exc: Exception) -> str:
    if isinstance(exc, bulkheads.BulkheadFull):
        return str(exc)
    broker = url_without_credentials(settings.CELERY_BROKER_URL)
    return f"the broker at {broker} did not take it: {exc}"[:300]
