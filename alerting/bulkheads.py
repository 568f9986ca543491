"""Bulkheads: a bounded share of each API worker's request threads per outside service.

Why: an API worker serves every request with one of MAC_API_THREADS threads. A request
that waits on Prometheus, Alertmanager or the broker holds its thread for as long as
that service takes to answer or time out, so a hung Prometheus and four node pages of
charts (32 requests) once held all 16 threads of a master for 6 s each: /health and the
agents' registrations waited 11.5 s behind them (issue 26).

What: each such service gets a per-worker semaphore of MAC_BULKHEAD_* slots, taken
without waiting (the charts, which wait on the event loop rather than in a thread,
have a larger share: macweb.asgi). A request that finds them all taken fails at once with the reason
(the chart or the alerts panel says so, the API answers 503, a broker publish is left
to the poll that reconciles it anyway), so the other threads always stay free for
/health, the agent endpoints and the pages that read only the database.
(macweb.checks warns when the slots leave fewer than two threads free.)

A semaphore of the process rather than a proxy limit, because the share that matters is
of this worker's threads, and because the reason belongs in the answer each caller
already gives (docs/benchmarks.md, "Bulkheads", has the figures). It lives here, the lowest
layer of its users: the alerting app (Alertmanager, the broker) and macweb's dashboard
(Prometheus), which sits above it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

# Service -> the setting that sizes its bulkhead.
SETTINGS = {
    "Prometheus": "BULKHEAD_PROMETHEUS",
    "Alertmanager": "BULKHEAD_ALERTMANAGER",
    "the broker": "BULKHEAD_BROKER",
}
VARIABLES = {name: f"MAC_{setting}" for name, setting in SETTINGS.items()}
# Services whose callers wait in a request thread; the charts wait for Prometheus on
# the event loop instead (macweb.asgi), so their share is of sockets, not of threads.
THREAD_HOLDING = ("Alertmanager", "the broker")


class BulkheadFull(RuntimeError):
    """Every slot of a service's bulkhead is taken; str() says which and what to do."""

    def __init__(self, service: str, slots: int) -> None:
        super().__init__(
            f"{slots} request(s) of this API worker already wait on {service} "
            f"({VARIABLES[service]}={slots}); it answers slowly or not at all, retry shortly"
        )
        self.service = service


class Bulkhead:
    """A non-blocking semaphore sized by a setting, read when first used."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._lock = threading.Lock()
        self._semaphore: threading.BoundedSemaphore | None = None
        self.slots = 0

    def _get(self) -> threading.BoundedSemaphore:
        with self._lock:
            if self._semaphore is None:
                self.slots = getattr(settings, SETTINGS[self.service])
                self._semaphore = threading.BoundedSemaphore(self.slots)
            return self._semaphore

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot for the block; BulkheadFull at once when none is free."""
        semaphore = self._get()
        if not semaphore.acquire(blocking=False):
            raise BulkheadFull(self.service, self.slots)
        try:
            yield
        finally:
            semaphore.release()

    def reset(self) -> None:
        """Forget the size (tests that change the setting)."""
        with self._lock:
            self._semaphore = None


PROMETHEUS = Bulkhead("Prometheus")
ALERTMANAGER = Bulkhead("Alertmanager")
BROKER = Bulkhead("the broker")
