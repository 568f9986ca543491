"""A day of history for a few nodes, loaded into the store by its import API.

The scale bench starts every engine fresh, so a 24 h chart would read a few minutes of
data: the figure of a young store. Before the charts are asked, this gives DAY_NODES
nodes (the charted one first) the day before their first live sample: every series the
node page's charts read (the metric names in their queries), one sample per scrape
interval, through victoria-metrics' /api/v1/import (JSON lines), for the bench only.

Each series continues what the store scraped: a counter (`*_total`) falls back in time
at the rate it rose over the live minutes, never below zero (as if the exporter started
during the day); any other series keeps its last value with a gentle daily swing, so the
charts have a shape. The values are made up; the volume (series, points, labels) is the
store's real one for those nodes.

Prometheus has no import API (its backfill writes blocks offline with promtool), so its
24 h charts are not measured.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator

DAY = 86_400
DAY_NODES = 2
DAY_SWING = 0.1  # a gauge's daily swing, as a share of its last value
IMPORT_BATCH = 200  # series per POST: a few MB of JSON
# A PromQL metric name where a selector opens (`name{`), as the charts' queries write them.
METRIC_NAME = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")


def chart_metrics(charts: Iterable[Iterable[str]]) -> list[str]:
    """The metric names the charts' queries read."""
    return sorted({name for queries in charts for expr in queries
                   for name in METRIC_NAME.findall(expr)})  # fmt: skip


def selector(names: list[str], nodes: list[int]) -> str:
    node_re = "|".join(str(n) for n in nodes)
    return f'{{__name__=~"{"|".join(map(re.escape, names))}",node=~"{node_re}"}}'


def export(store: str, match: str, start: float) -> list[dict]:
    """The store's raw samples of `match` since `start` (one dict per series)."""
    query = urllib.parse.urlencode({"match[]": match, "start": f"{start:.3f}"})
    with urllib.request.urlopen(f"{store}/api/v1/export?{query}", timeout=120) as answer:
        return [json.loads(line) for line in answer if line.strip()]


def day_points(interval: int) -> int:
    """Samples in a day of one series, one per interval."""
    return DAY // interval


def history(series: dict, end_ms: int, interval: int) -> dict:
    """`series` (an export line) given the day before end_ms, one point per interval."""
    name = series["metric"].get("__name__", "")
    values, stamps = series["values"], series["timestamps"]
    step, points = interval * 1000, day_points(interval)
    at = [end_ms - (points - k) * step for k in range(points)]
    if name.endswith("_total"):
        span = stamps[-1] - stamps[0]
        per_ms = max(0.0, (values[-1] - values[0]) / span) if span > 0 else 0.0
        made = [max(0.0, values[0] - per_ms * (stamps[0] - t)) for t in at]
    else:
        last = values[-1]
        made = [last * (1 + DAY_SWING * math.sin(2 * math.pi * t / (DAY * 1000))) for t in at]
    return {"metric": series["metric"], "values": made, "timestamps": at}


def import_lines(store: str, lines: Iterator[dict]) -> None:
    batch: list[bytes] = []

    def send() -> None:
        request = urllib.request.Request(
            f"{store}/api/v1/import", data=b"\n".join(batch) + b"\n", method="POST"
        )
        with urllib.request.urlopen(request, timeout=300) as answer:
            answer.read()
        batch.clear()

    for line in lines:
        batch.append(json.dumps(line, separators=(",", ":")).encode())
        if len(batch) >= IMPORT_BATCH:
            send()
    if batch:
        send()


def searchable(store: str, match: str, at: float) -> int:
    """How many series of `match` the store can read in the hour before `at`."""
    query = urllib.parse.urlencode(
        {"query": f"count(last_over_time({match}[1h]))", "time": f"{at:.3f}"}
    )
    with urllib.request.urlopen(f"{store}/api/v1/query?{query}", timeout=60) as answer:
        result = json.load(answer)["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def load_day(
    store: str,
    names: list[str],
    nodes: list[int],
    since: float,
    interval: int,
    wait: float = 60,
) -> tuple[int, int, float]:
    """(series, samples, seconds): the day before the nodes' first live sample (scraped
    since `since`) imported, and readable, in the store at `store`."""
    began = time.monotonic()
    match = selector(names, nodes)
    live = [s for s in export(store, match, since) if len(s["values"]) > 0]
    if not live:
        raise RuntimeError(f"the store has no samples of {match} to give a day of history")
    end_ms = min(s["timestamps"][0] for s in live)
    made = (history(s, end_ms, interval) for s in live)
    import_lines(store, made)
    # Imported rows become searchable once the store flushes them (about a second), and
    # not all series at once: wait for every one.
    noon = end_ms / 1000 - DAY / 2
    deadline = time.monotonic() + wait
    while searchable(store, match, noon) < len(live):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the day imported into {store} is not searchable in {wait:.0f} s")
        time.sleep(0.5)
    return len(live), len(live) * day_points(interval), time.monotonic() - began
