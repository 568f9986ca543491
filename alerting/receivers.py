"""Signal receivers: the inventory's maintenance changes become silence updates at once.

The inventory sends `maintenance_changed` after the change commits (it cannot import
this app). The silences are updated by a Celery task, so the admin's or the API's
request never waits on Alertmanager; beat's poll puts right whatever this misses.
"""

from __future__ import annotations

import logging

from django.dispatch import receiver

from alerting.tasks import sync_silences
from inventory.signals import maintenance_changed

log = logging.getLogger(__name__)


@receiver(maintenance_changed, dispatch_uid="alerting.silences")
def update_silences(sender, node_ids: list[int], **kwargs) -> None:
    try:
        sync_silences.delay(list(node_ids))
    except Exception:
        # The broker is down: beat's next poll reconciles every silence anyway.
        log.warning("could not queue the silence update for nodes %s", node_ids, exc_info=True)
