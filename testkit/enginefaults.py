"""The fault run of scale-out mode's engines, shared by both runtimes' tests (issue 31).

A fault (kill -9, SIGSTOP, a full disk) is made while `FrontDoorWatch` asks the master's
/health and its login page, one after the other, from a thread of its own: every answer
is timed, and /health's says when the master named the engine (detected) and when the
engine was well again (recovered). `lost_scrapes` then reads what the scrapers sent to
the store for the whole window, and counts the scrapes that never arrived.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Answer:
    at: float  # time.time() when it was asked
    page: str  # "health" or "login"
    status: int
    seconds: float
    body: dict = field(default_factory=dict)


def ask(
    url: str, timeout: float = 10.0, context: ssl.SSLContext | None = None
) -> tuple[int, bytes, float]:
    """(status, body, seconds) of one GET; status 0 when nothing answered."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except OSError:
        status, body = 0, b""
    return status, body, time.monotonic() - started


class FrontDoorWatch:
    """/health and the login page, asked in turn every `interval` until stopped.

    `people` is where a person's browser reaches the login page when it is not `master`
    itself: from another host the front door sends people's pages to HTTPS, so a Docker
    master's login page is asked there, trusting the master's CA through `context`.
    """

    def __init__(
        self,
        master: str,
        interval: float = 0.25,
        people: str = "",
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.master, self.interval = master.rstrip("/"), interval
        self.people, self.context = (people or master).rstrip("/"), context
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="front-door-watch", daemon=True)

    def __enter__(self) -> FrontDoorWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            for page, url in (
                ("health", self.master + "/health"),
                ("login", self.people + "/accounts/login/"),
            ):
                at = time.time()
                status, body, seconds = ask(url, context=self.context)
                parsed = {}
                if page == "health":
                    try:
                        parsed = json.loads(body or b"{}")
                    except ValueError:
                        parsed = {}
                self.answers.append(Answer(at, page, status, seconds, parsed))
            self._stop.wait(self.interval)

    def health(self, since: float = 0.0) -> list[Answer]:
        return [a for a in self.answers if a.page == "health" and a.at >= since]

    def first(self, check: str, ok: bool, since: float, says: str = "") -> Answer | None:
        """The first /health answer since `since` whose `check` is `ok` (and whose detail
        says `says`)."""
        for answer in self.health(since):
            result = (answer.body.get("checks") or {}).get(check)
            if result and result["ok"] is ok and says in result["detail"]:
                return answer
        return None

    def wait(self, check: str, ok: bool, since: float, says: str = "", timeout: float = 120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.first(check, ok, since, says)
            if found is not None:
                return found
            time.sleep(0.1)
        last = self.health(since)[-1:] or ["nothing"]
        raise AssertionError(f"/health: {check} never {'ok' if ok else 'failing'}: {last}")

    def slowest(self, since: float, until: float) -> dict[str, float]:
        """{page: the longest answer} between the two moments."""
        slowest: dict[str, float] = {}
        for answer in self.answers:
            if since <= answer.at <= until:
                slowest[answer.page] = max(slowest.get(answer.page, 0.0), answer.seconds)
        return slowest

    def kept_open(self, since: float, until: float) -> dict[str, float]:
        """Assert both pages answered as expected between the two moments, and never
        waited on an engine; {page: the longest answer}.

        Waiting on a frozen engine costs the engine check's timeout (it accepts the
        connection and never answers; scraping.engines.CHECK_TIMEOUT): every answer came
        before that, so none asked the engine. How fast they answer is bench's to
        measure (the figures keep the slowest)."""
        from scraping.engines import CHECK_TIMEOUT

        slowest = self.slowest(since, until)
        assert slowest["health"] < CHECK_TIMEOUT and slowest["login"] < CHECK_TIMEOUT, slowest
        assert not self.failures(since, until), self.failures(since, until)[:3]
        return slowest

    def failures(self, since: float, until: float) -> list[Answer]:
        """Answers that were not what a load balancer and a person expect."""
        return [
            a
            for a in self.answers
            if since <= a.at <= until and a.status not in (200, 503 if a.page == "health" else 200)
        ]


@dataclass
class FreezeKill:
    """The moments of one `freeze_then_kill`: the freeze, /health naming the engine, the
    kill, /health well again."""

    frozen: float
    detected: Answer
    killed: float
    back: Answer

    def figure(self, fault: str, watch: FrontDoorWatch) -> Figure:
        """The fault's line, once the front door is shown to have stayed open."""
        slowest = watch.kept_open(self.frozen, self.back.at)
        return Figure(
            fault, self.detected.at - self.frozen, self.back.at - self.killed,
            slowest["health"], slowest["login"], 0, at=self.frozen,
        )  # fmt: skip


def freeze_then_kill(watch: FrontDoorWatch, pid: int, check: str, says: str) -> FreezeKill:
    """SIGSTOP the engine until /health names it, then SIGKILL it and wait for /health to
    call it well again. Frozen first because a supervisor or Docker restarts a killed
    engine within a second or so, less than the checks' period."""
    time.sleep(1)
    frozen = time.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        detected = watch.wait(check, False, frozen, says)
    finally:
        os.kill(pid, signal.SIGKILL)
    killed = time.time()
    back = watch.wait(check, True, killed)
    time.sleep(1)
    return FreezeKill(frozen, detected, killed, back)


def lost_samples(series: list[dict], start: float, end: float, interval: float) -> int:
    """How many scrapes are missing from each series' raw samples between start and end.

    `series` is a range query's answer (`up{...}[N s]`): samples at most `interval` apart
    are all there; a wider gap is round(gap / interval) - 1 missing scrapes.
    """
    lost = 0
    for one in series:
        stamps = sorted(float(at) for at, _value in one["values"] if start <= float(at) <= end)
        edges = [start, *stamps, end] if stamps else [start, end]
        for before, after in itertools.pairwise(edges):
            gap = after - before
            if gap > 1.5 * interval:
                lost += round(gap / interval) - 1
    return lost


def raw_samples(
    query: Callable[[str, float], dict], selector: str, start: float, end: float
) -> list[dict]:
    """The raw samples of `selector` from `start` to `end`: `query(promql, at)` runs an
    instant query of the range vector at `end`."""
    seconds = max(1, round(end - start + 1))
    answer = query(f"{selector}[{seconds}s]", end)
    return ((answer or {}).get("data") or {}).get("result") or []


def lost_scrapes(
    query: Callable[[str, float], dict],
    selector: str,
    series: int,
    window: tuple[float, float],
    interval: float,
) -> int:
    """Scrapes of `selector`'s `series` series missing from the store in `window`.

    A series with no sample at all in the window is not in the answer: every scrape the
    window holds counts as lost for it (a killed store can drop its last seconds for most
    nodes).
    """
    start, end = window
    found = raw_samples(query, selector, start, end)
    assert len(found) <= series, found
    absent = series - len(found)
    return lost_samples(found, start, end, interval) + absent * round((end - start) / interval)


@dataclass
class Figure:
    """One fault's line in docs/operations.md."""

    fault: str
    detected: float  # seconds from the fault to /health naming the engine
    recovered: float  # seconds from the fault (or its end) to /health well again
    slowest_health: float
    slowest_login: float
    lost: int  # scrapes that never reached the store
    note: str = ""
    at: float = 0.0  # time.time() of the fault

    def row(self) -> str:
        slowest = f"{self.slowest_health:.2f} s / {self.slowest_login:.2f} s"
        return (
            f"| {self.fault} | {self.detected:.1f} s | {self.recovered:.1f} s | {slowest} | "
            f"{self.lost} | {self.note} |"
        )
