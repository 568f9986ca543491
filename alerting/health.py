"""Alerting's part of the master's /health: is Alertmanager up, is every channel in use,
do the master's own node alerts reach it.

All are "degraded" checks (healthcheck.health): the master keeps probing, storing and
showing nodes without them, but nobody would be told of a failure, which an operator
must see.

/health answers anyone who reaches the front door, so a channel's name and the reason it
is left out (which names its host) are given only to a logged-in caller (`named`);
others get the count and the words that say what kind of trouble it is.
"""

from __future__ import annotations

import time

from django.conf import settings

from alerting.client import Alertmanager, AlertmanagerUnavailable
from alerting.models import NotificationChannel
from alerting.nodealerts import post_stats
from alerting.services import file_out_of_step, pending_channel

# /health answers load balancers and agents: a hung Alertmanager must not hold it long.
HEALTH_TIMEOUT = 1.0


def check_alertmanager(client: Alertmanager | None = None) -> tuple[bool, str]:
    client = client or Alertmanager(
        settings.ALERTMANAGER_URL, min(settings.ALERTMANAGER_TIMEOUT, HEALTH_TIMEOUT)
    )
    try:
        status = client.status()
    except AlertmanagerUnavailable as exc:
        return False, f"alerts unavailable: {exc}"
    version = (status.get("versionInfo") or {}).get("version", "?")
    since = status.get("uptime", "?")
    return True, f"Alertmanager {version} at {client.where}, up since {since}"


LOG_IN = "log in to see which and why"


def check_channels(named: bool = True) -> tuple[bool, str]:
    """Every enabled channel made it into alertmanager.yml (names the ones that did not
    to a logged-in caller)."""
    if not settings.ALERTMANAGER_MANAGED:
        return True, "routes are the site's own (MAC_ALERTMANAGER_MANAGED=0)"
    enabled = NotificationChannel.objects.filter(enabled=True)
    bad = list(enabled.exclude(config_error="").values_list("name", "config_error"))
    if bad and named:
        return False, "; ".join(f"channel {name!r} left out: {error}" for name, error in bad)
    if bad:
        return False, f"{len(bad)} channel(s) left out of alertmanager.yml ({LOG_IN})"
    count = enabled.count()
    if not count:
        return True, "no notification channel yet: alerts reach nobody (Admin > Alerts)"
    return True, f"{count} channel(s) in use"


def check_config_in_step(named: bool = True) -> tuple[bool, str]:
    """alertmanager.yml says what the database says (a full disk can keep them apart, and
    a channel whose name now resolves inside the master is held back)."""
    if not named:
        pending = NotificationChannel.objects.exclude(pending_reason="").count()
        if pending:
            return False, (
                f"{pending} channel(s) saved but pending, not in alertmanager.yml ({LOG_IN})"
            )
    if not settings.ALERTMANAGER_MANAGED:
        return True, "routes are the site's own (MAC_ALERTMANAGER_MANAGED=0)"
    pending = pending_channel()
    if pending:
        return False, pending
    why = file_out_of_step()
    if why:
        return False, f"{why}; alerts follow the old configuration until MAC's poll writes it"
    return True, "alertmanager.yml matches the channels"


def check_node_alert_posts() -> tuple[bool, str]:
    """The last post of the master's node alerts reached Alertmanager (alerting.nodealerts)."""
    stats = post_stats()
    if stats["last_error"]:
        return False, (
            f"node alerts not posted for {time.time() - stats['failing_since']:.0f} s "
            f"({stats['failed']} failed posts, retried after every sweep): {stats['last_error']}"
        )
    if not stats["ok"]:
        return True, "no node alert posted yet"
    return True, f"node alerts posted ({stats['ok']} posts, {stats['failed']} failed)"
