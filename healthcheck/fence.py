"""Fencing tokens: a sweep that has lost its lock cannot commit.

The sweep's Redis lock (healthcheck.state) keeps two sweeps from running at once
while all is well, but it has a TTL: a sweep that stalls past it (a long pause, a
Redis restart, a worker that was thought dead and was only slow) finds out only when
it next looks, and a look before the write leaves the gap between the look and the
commit. So, as in Kleppmann's "How to do distributed locking":

- every sweep, right after it takes the lock, claims the next fencing token
  (claim_fence: the one row of SweepFence incremented, in its own short
  transaction), and hands it to its chunk tasks with the lock's token;
- every write of a sweep or of one of its chunks ends, inside its own transaction,
  with Fence.check: the lock is still its own in Redis, and
  `SweepFence.filter(token__lte=ours).update(token=ours)` matches the row. Otherwise
  SweepLockLost rolls the whole write back: no Node row and no event of that
  sweep is committed.

Why that is enough: a newer sweep takes the lock first and then claims a larger
token. Its UPDATE of the fence row either commits before our check (ours then
matches no row and we roll back), or waits for our transaction, which then commits
first: a write of an older sweep can never land after a newer sweep has started. The
check is the last statement of the transaction, so the fence row is locked only for
the moment between it and the commit, and the chunks of one sweep, which share a
token, never wait on each other for long.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from django.db import transaction
from django.db.models import F
from redis.lock import Lock

from healthcheck.models import SweepFence
from healthcheck.state import SweepLockLost

FENCE_ID = 1


def claim_fence() -> int:
    """The next fencing token; from now on, writes of sweeps with older tokens fail."""
    with transaction.atomic():
        SweepFence.objects.get_or_create(pk=FENCE_ID)
        SweepFence.objects.filter(pk=FENCE_ID).update(token=F("token") + 1)
        return SweepFence.objects.values_list("token", flat=True).get(pk=FENCE_ID)


def current_fence() -> int:
    """The newest token claimed so far (0 before the first sweep)."""
    return SweepFence.objects.filter(pk=FENCE_ID).values_list("token", flat=True).first() or 0


@dataclass(frozen=True)
class Fence:
    """What a sweep's write must still hold when it commits: its token and its lock.

    `lock` is None for a sweep run outside the Celery tasks (a test, a benchmark): its
    fresh token alone fences it against the sweeps before it.
    """

    token: int
    lock: Lock | None = None

    @classmethod
    def claim(cls, lock: Lock | None = None) -> Fence:
        return cls(claim_fence(), lock)

    def check(self) -> None:
        """The last statement of the write's transaction; raises SweepLockLost to roll
        it back unless this sweep still holds its lock and the newest token."""
        if not transaction.get_connection().in_atomic_block:
            raise RuntimeError("Fence.check() belongs inside the write's transaction")
        if self.lock is not None:
            try:
                owned = self.lock.owned()
            except redis.RedisError as exc:
                raise SweepLockLost(f"cannot check the sweep lock: {exc}") from exc
            if not owned:
                raise SweepLockLost("the sweep lock expired or was taken by another sweep")
        fenced = SweepFence.objects.filter(pk=FENCE_ID, token__lte=self.token)
        if not fenced.update(token=self.token):
            raise SweepLockLost(
                f"a newer sweep holds the fence (ours is {self.token}, now {current_fence()})"
            )
