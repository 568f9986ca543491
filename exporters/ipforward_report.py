"""Report each ip_forward reset to the master, so it shows in the node's history.

`POST /api/v1/nodes/self/events` with the node's key (contract.master_api). The master
is often unreachable exactly when a reset happens (in bridge mode forwarding carries
the agent's own traffic too), so reports wait in a queue and are retried with backoff
(1 s doubling to 60 s, or the master's Retry-After) until the master takes them. The
queue is bounded: past MAX_PENDING reports, a new reset is folded into the newest
waiting report (its `resets` count grows), so a flapping link costs memory of its
own size, never the count. A report the master refuses as malformed (400) is dropped
with a log line: sending it again would not change the answer.

The configuration (MASTER_IP, the node key) is read again before every attempt: the
agent may register, or get a new key, while a report waits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from contract.master_api import MasterClient, Reply
from contract.pinning import UntrustedMaster
from exporters.ipforward import Reset

log = logging.getLogger("exporters")

MAX_PENDING = 100
FIRST_DELAY, MAX_DELAY = 1.0, 60.0
EVENT_KIND = "ip_forward_reset"


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


@dataclass
class Report:
    """One event for the master; `resets` > 1 when resets were folded into it."""

    reset: Reset
    resets: int = 1

    def body(self) -> dict:
        carrier = self.reset.carrier
        return {
            "kind": EVENT_KIND,
            "when": _iso(self.reset.at),
            "link": carrier.link if carrier else "",
            "carrier_at": _iso(carrier.at) if carrier else None,
            "reasserted": self.reset.reasserted,
            "resets": self.resets,
        }


def retry_after(reply: Reply) -> float | None:
    try:
        return max(0.0, float(reply.headers.get("retry-after", "")))
    except ValueError:
        return None


class ResetReporter:
    """The queue and the thread that empties it into the master; also a /metrics source."""

    name = "ipforward_report"
    inline = True

    def __init__(
        self,
        client: Callable[[], MasterClient | None],
        *,
        max_pending: int = MAX_PENDING,
        first_delay: float = FIRST_DELAY,
        max_delay: float = MAX_DELAY,
    ) -> None:
        self.client = client
        self.max_pending = max_pending
        self.first_delay = first_delay
        self.max_delay = max_delay
        self._pending: list[Report] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.last_error = ""

    def add(self, reset: Reset) -> None:
        with self._lock:
            if len(self._pending) < self.max_pending:
                self._pending.append(Report(reset))
            else:
                newest = self._pending[-1]
                newest.reset, newest.resets = reset, newest.resets + 1
        self._wake.set()

    def pending(self) -> int:
        with self._lock:
            return sum(report.resets for report in self._pending)

    def send_pending(self) -> float | None:
        """Send what waits, oldest first; None when all went, else seconds to wait."""
        while True:
            with self._lock:
                report = self._pending[0] if self._pending else None
            if report is None:
                return None
            client = self.client()
            if client is None:
                self.last_error = "no MASTER_IP or no node key yet (not registered)"
                return self.max_delay
            body = report.body()
            try:
                reply = client.report_event(body)
            except UntrustedMaster as exc:
                # The pin does not match: nothing was sent; keep the report for later.
                self.last_error = str(exc)
                log.error("ip_forward reset not reported: %s", exc)
                return self.max_delay
            if reply.status in (201, 400):
                with self._lock:
                    self._pending.remove(report)
                if reply.status == 201:
                    self.sent += report.resets
                    self.last_error = ""
                else:
                    log.error(
                        "the master refused an ip_forward report %s: %s", body, reply.reason()
                    )
                continue
            self.last_error = reply.reason()
            log.warning("ip_forward reset not reported yet (%s); retrying", self.last_error)
            return retry_after(reply) if reply.status == 429 else 0.0

    def _loop(self) -> None:
        delay = self.first_delay
        while not self._stop.is_set():
            self._wake.clear()
            wait = self.send_pending()
            if wait is None:
                delay = self.first_delay
                self._wake.wait()  # until the next reset (or close)
                continue
            # Backoff: a Retry-After wins when longer; a new reset does not cut the wait.
            self._stop.wait(max(wait, delay))
            delay = min(delay * 2, self.max_delay)

    def start(self) -> ResetReporter:
        self._thread = threading.Thread(target=self._loop, name="ipforward-report", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "mac_ipforward_reports_pending",
            "ip_forward resets not yet recorded by the master (retried with backoff).",
            value=self.pending(),
        )
        yield CounterMetricFamily(
            "mac_ipforward_reports_sent",
            "ip_forward resets recorded in the node's history on the master.",
            value=self.sent,
        )
