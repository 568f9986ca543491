"""Whether slurmctld answers the master, remembered between passes, with the retry backoff.

The drain pass (scheduler.drainpass) asks slurmctld for a ping before anything else
(`scontrol ping`, at most 2 s). When it does not answer, the pass stops there and the
next tries wait longer each time: one probe interval, then two, four... up to
MAX_BACKOFF seconds, so an outage costs slurmctld (and the worker) almost nothing.
The first pass after it answers again drains what waited.

The state lives in the cache (Redis), shared by the worker that runs the pass and the
API server whose /health reports it (scheduler.health) without asking Slurm itself.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from django.conf import settings
from django.core.cache import cache

LINK_KEY = "scheduler:slurm:link"
MAX_BACKOFF = 300.0


@dataclass
class LinkState:
    """The last word from slurmctld: answering or not, since when, and the next try."""

    reachable: bool = True
    detail: str = ""  # the controller that answered, or why none did
    since: float = 0.0  # Unix time it became so
    checked_at: float = 0.0  # the last ping
    failures: int = 0  # pings failed in a row
    retry_at: float = 0.0  # no ping before this while unreachable
    # True: slurmctld did not answer (down, network, munge); False: Slurm's tools failed
    # otherwise (missing, no slurm.conf, output MAC cannot read).
    unreachable: bool = True

    def due(self, now: float | None = None) -> bool:
        """Whether a pass may ask slurmctld now (always, unless backing off)."""
        now = time.time() if now is None else now
        # Half an interval early: sweeps do not land on the second.
        return self.reachable or now >= self.retry_at - settings.PROBE_INTERVAL / 2


def load() -> LinkState | None:
    """The remembered state; None before the first pass."""
    found = cache.get(LINK_KEY)
    return LinkState(**found) if found else None


def backoff(failures: int) -> float:
    """Seconds before the next ping after `failures` failed ones in a row."""
    return min(settings.PROBE_INTERVAL * 2 ** max(failures - 1, 0), MAX_BACKOFF)


def answered(detail: str, now: float | None = None) -> LinkState:
    now = time.time() if now is None else now
    last = load()
    since = last.since if last and last.reachable and last.since else now
    state = LinkState(True, detail, since, now, 0, 0.0)
    cache.set(LINK_KEY, asdict(state), None)
    return state


def failed(detail: str, now: float | None = None, *, unreachable: bool = True) -> LinkState:
    now = time.time() if now is None else now
    last = load()
    failures = (last.failures if last and not last.reachable else 0) + 1
    since = last.since if last and not last.reachable and last.since else now
    state = LinkState(
        False, detail[:500], since, now, failures, now + backoff(failures), unreachable
    )
    cache.set(LINK_KEY, asdict(state), None)
    return state


def forget() -> None:
    cache.delete(LINK_KEY)
