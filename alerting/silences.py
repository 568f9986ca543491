"""Maintenance means silence: one Alertmanager silence per node in maintenance.

MAC makes its silences with `createdBy: "mac"` and matchers `node="<id>"` plus
`cluster_name="<MAC_CLUSTER_NAME>"` (the labels every MAC alert carries), and touches
no other silence: ones that people made stay as they are. The alerts the master posts
itself (MacNodeOffline, MacGpuUnhealthy, MacGpuDegraded) are left out of the silence
(`alertname!~...`): the master ends them itself when maintenance begins, and a muted
end never reaches the receivers (Alertmanager drops a silenced resolved alert, so a
pager would stay "firing"; and the notification log would then swallow the same alert
firing again after maintenance). `reconcile()` makes the
silences match the inventory:

- a node in maintenance without an active MAC silence gets one (also after
  Alertmanager lost its silences: killed before its snapshot, or a new data volume);
- a MAC silence whose node is no longer in maintenance, or is gone, is expired;
- a silence close to its end (they last SILENCE_DAYS) is replaced by a fresh one.

It runs when a node's maintenance changes (alerting.receivers, through a Celery task)
and on every poll of Alertmanager by beat (alerting.tasks.sync_alertmanager), one at a
time (a Redis lock): a reconcile reads Alertmanager's silences, then the database, then
writes, and two that overlap (maintenance switched off then on at once) could each act
on what the other was changing: the first expiring the silence the second had just read
as lasting, which left a node in maintenance without one until the next poll.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from redis.exceptions import LockError
from redis.lock import Lock

from alerting.client import Alertmanager, node_of_label
from alerting.nodealerts import POSTED_ALERTNAMES
from inventory.models import Node

log = logging.getLogger(__name__)

CREATED_BY = "mac"
LOCK_KEY = "alerting:silences:lock"
# How long a task waits for another's reconcile to finish (beat's poll does not wait).
LOCK_WAIT = 30.0
SILENCE_DAYS = 365
RENEW_DAYS = 30
LIVE_STATES = {"active", "pending"}


@dataclass
class Reconciled:
    created: list[int] = field(default_factory=list)  # node ids
    expired: list[int] = field(default_factory=list)


def matchers(node_id: int) -> list[dict]:
    return [
        {"name": "node", "value": str(node_id), "isRegex": False, "isEqual": True},
        {"name": "cluster_name", "value": settings.CLUSTER_NAME, "isRegex": False, "isEqual": True},
        {"name": "alertname", "value": "|".join(sorted(POSTED_ALERTNAMES)), "isRegex": True,
         "isEqual": False},
    ]  # fmt: skip


def _same_matchers(silence: dict, node_id: int) -> bool:
    """The silence has today's matchers (one made by an earlier release is replaced)."""

    def key(item: dict) -> tuple:
        return (item.get("name"), item.get("value"), bool(item.get("isRegex")),
                item.get("isEqual", True))  # fmt: skip

    return sorted(map(key, silence.get("matchers", []))) == sorted(map(key, matchers(node_id)))


def new_silence(node_id: int, hostname: str, now: dt.datetime | None = None) -> dict:
    now = now or timezone.now()
    return {
        "matchers": matchers(node_id),
        "startsAt": now.isoformat(),
        "endsAt": (now + dt.timedelta(days=SILENCE_DAYS)).isoformat(),
        "createdBy": CREATED_BY,
        "comment": (
            f"MAC maintenance of {hostname} (node {node_id}, cluster {settings.CLUSTER_NAME}). "
            "MAC ends it when the node's maintenance flag is cleared."
        ),
    }


def node_of(silence: dict) -> int | None:
    """The node id of a silence MAC made for this cluster, else None (someone else's)."""
    if silence.get("createdBy") != CREATED_BY:
        return None
    if silence.get("status", {}).get("state") not in LIVE_STATES:
        return None
    found = {
        item.get("name"): item.get("value")
        for item in silence.get("matchers", [])
        if not item.get("isRegex") and item.get("isEqual", True)
    }
    if found.get("cluster_name") != settings.CLUSTER_NAME:
        return None
    # ASCII digits only: "²".isdigit() holds (int() refuses it) and int("٣") is 3.
    return node_of_label(str(found.get("node", "")))


def _parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class Busy(Exception):
    """Another reconcile held the lock for longer than this one would wait."""


class _Held:
    """The reconcile lock while held: renew() before each write, so a long reconcile keeps
    it, and one that lost it (its holder stalled past the TTL) stops writing."""

    def __init__(self, lock: Lock | None) -> None:
        self.lock = lock

    def renew(self) -> None:
        if self.lock is None:
            return
        try:
            self.lock.reacquire()
        except LockError:
            raise Busy("the silences' lock was lost to another reconcile") from None
        except redis.RedisError:
            pass  # Redis gone mid-way: finish without it, as when it could not be taken


def _lock_ttl() -> float:
    # Renewed before every write: it need only outlast one call to Alertmanager.
    return max(30.0, 4 * settings.ALERTMANAGER_TIMEOUT)


@contextmanager
def one_at_a_time(wait: float) -> Iterator[_Held]:
    """Hold the reconcile lock (waiting up to `wait` s); raises Busy. A Redis that does
    not answer leaves it unlocked, as before the lock: the poll repairs any overlap."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    lock = client.lock(cache.make_key(LOCK_KEY), timeout=_lock_ttl(), sleep=0.05)
    try:
        try:
            taken = lock.acquire(blocking=wait > 0, blocking_timeout=wait)
        except redis.RedisError as exc:
            log.warning("silences reconciled without their lock (Redis: %s)", exc)
            taken = None
        if taken is False:
            raise Busy(f"another reconcile of the silences held them for over {wait:g} s")
        try:
            yield _Held(lock if taken else None)
        finally:
            if taken:
                with suppress(LockError, redis.RedisError):  # expired, or Redis gone
                    lock.release()
    finally:
        client.close()


def reconcile(
    node_ids: Iterable[int] | None = None,
    client: Alertmanager | None = None,
    *,
    wait: float | None = None,
) -> Reconciled:
    """Create and expire MAC's silences so they match maintenance (of `node_ids`, or all).

    Raises AlertmanagerUnavailable when Alertmanager does not answer, Busy when another
    reconcile holds the lock past `wait` seconds (LOCK_WAIT); the next poll tries again.
    """
    client = client or Alertmanager.from_settings()
    with one_at_a_time(LOCK_WAIT if wait is None else wait) as held:
        return _reconcile(node_ids, client, held)


def _reconcile(node_ids: Iterable[int] | None, client: Alertmanager, held: _Held) -> Reconciled:
    ours: dict[int, list[dict]] = {}
    for silence in client.silences():
        node_id = node_of(silence)
        if node_id is not None:
            ours.setdefault(node_id, []).append(silence)
    in_maintenance = Node.objects.filter(maintenance=True)
    if node_ids is not None:
        node_ids = set(node_ids)
        in_maintenance = in_maintenance.filter(pk__in=node_ids)
    wanted = dict(in_maintenance.values_list("pk", "hostname"))
    considered = set(node_ids) if node_ids is not None else set(wanted) | set(ours)
    now = timezone.now()
    renew_before = now + dt.timedelta(days=RENEW_DAYS)
    done = Reconciled()
    for node_id in sorted(considered):
        existing = ours.get(node_id, [])
        if node_id in wanted:
            lasting = [
                s
                for s in existing
                if _parse_time(s["endsAt"]) > renew_before and _same_matchers(s, node_id)
            ]
            if lasting:
                continue
            held.renew()
            client.create_silence(new_silence(node_id, wanted[node_id], now))
            done.created.append(node_id)
            for silence in existing:  # the old one, about to end, is replaced
                client.expire_silence(silence["id"])
        elif existing:
            held.renew()
            for silence in existing:
                client.expire_silence(silence["id"])
            done.expired.append(node_id)
    return done
