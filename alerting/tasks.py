"""Celery tasks of the alerting app: keep Alertmanager in step, and tell the dashboards.

`sync_alertmanager` runs on beat every MAC_ALERT_POLL_INTERVAL seconds (macweb.celery),
with an expiry below the interval so polls never pile up. One poll:

1. asks Alertmanager for its firing alerts; when what a page would show changed since
   the last poll (including "alerts unavailable: <why>" and back), pushes it to every
   open dashboard (inventory.live.broadcast_alerts);
2. writes alertmanager.yml again when it differs from the channels in the database
   (a write that failed on a full disk), or when a channel's name now resolves inside
   the master (held back) or back outside (alerting.destinations), and reloads
   Alertmanager;
3. when Alertmanager answers: retries a reload that failed earlier, and reconciles
   the maintenance silences (alerting.silences), which puts back what a restarted
   Alertmanager lost. A step 2 that fails (a bug, a channel the generation cannot
   take) is logged and never skips this one.

`sync_silences` is the immediate update after a node's maintenance changed
(alerting.receivers).

`post_node_alerts` posts the master's own node alerts (alerting.nodealerts) after every
sweep: the sweep only queues it (queue_node_alerts), so a slow or absent Alertmanager
never holds a sweep up.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from alerting import nodealerts, services, silences
from alerting.client import Alertmanager, AlertmanagerUnavailable
from alerting.queries import firing_alerts
from inventory.live import broadcast_alerts

log = logging.getLogger(__name__)

SNAPSHOT_KEY = "alerting:snapshot-digest"


@shared_task(
    name="alerting.tasks.sync_alertmanager",
    ignore_result=True,
    expires=settings.ALERT_POLL_INTERVAL * 0.9,
)
def sync_alertmanager() -> dict:
    client = Alertmanager.from_settings()
    snapshot = firing_alerts(client)
    digest = snapshot.digest()
    pushed = cache.get(SNAPSHOT_KEY) != digest
    if pushed:
        broadcast_alerts(snapshot.as_dict())
        cache.set(SNAPSHOT_KEY, digest, None)
    result = {"available": snapshot.available, "firing": snapshot.count, "pushed": pushed}
    out_of_step = services.config_out_of_step() or services.destinations_moved()
    if out_of_step or (snapshot.available and cache.get(services.RELOAD_PENDING_KEY)):
        # A channel saved while the file could not be written (a full disk), a channel
        # whose name resolves inside the master now or again outside, or a reload that
        # failed: written and reloaded now, with no other change needed.
        try:
            applied = services.apply_channels(client=client)
        except Exception as exc:
            # The silences below do not depend on the channels: a channel the generation
            # cannot take must not stop maintenance silences from being repaired. /health
            # still says the file is out of step (alert_config) until a poll writes it.
            log.exception("alertmanager.yml not rewritten (the next poll retries)")
            result["apply_error"] = f"{type(exc).__name__}: {exc}"
        else:
            result["reloaded"] = applied.reloaded
            result["write_error"] = applied.write_error
    if not snapshot.available:
        return result
    try:
        # No wait: a maintenance change's reconcile is running; the next poll checks all.
        done = silences.reconcile(client=client, wait=0)
    except (AlertmanagerUnavailable, silences.Busy) as exc:
        log.warning("maintenance silences not reconciled: %s", exc)
        return result
    if done.created or done.expired:
        log.info("silences: made for nodes %s, expired for nodes %s", done.created, done.expired)
    result.update(silences_created=done.created, silences_expired=done.expired)
    return result


@shared_task(name="alerting.tasks.sync_silences", ignore_result=True)
def sync_silences(node_ids: list[int]) -> dict:
    """Make or expire the silences of these nodes now (their maintenance changed)."""
    try:
        done = silences.reconcile(node_ids)
    except (AlertmanagerUnavailable, silences.Busy) as exc:
        log.warning("silences of nodes %s not updated (beat's poll retries): %s", node_ids, exc)
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "created": done.created, "expired": done.expired}


@shared_task(
    name="alerting.tasks.post_node_alerts",
    ignore_result=True,
    # The next sweep queues a fresher one: a post still waiting by then is dropped.
    expires=settings.PROBE_INTERVAL,
)
def post_node_alerts() -> dict:
    post = nodealerts.post_node_alerts()
    if post.error:
        log.warning("node alerts not posted (the next sweep posts them again): %s", post.error)
    return {
        "firing": post.firing,
        "resolved": post.resolved,
        "error": post.error,
        "skipped": post.skipped,
    }


def queue_node_alerts() -> None:
    """Queue post_node_alerts for a worker; a broker that refuses is counted, not raised."""
    try:
        post_node_alerts.apply_async(retry=False)
    except Exception as exc:
        log.warning("could not queue the node alerts' post: %s", exc)
        nodealerts.record(nodealerts.Post(error=f"could not queue the post: {exc}"))
