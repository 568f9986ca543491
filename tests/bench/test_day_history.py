"""The scale bench's day of history: what it makes, and a real store that takes it."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request

import pytest

from bench.day_history import DAY, DAY_SWING, chart_metrics, history, load_day
from bench.scale_metrics import chart_queries
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.scraping.test_engines import _serve
from tests.scraping.test_metricsql_rules import query

INTERVAL = 15
POINTS = DAY // INTERVAL


def test_the_names_are_those_the_node_page_charts_read() -> None:
    names = chart_metrics(chart_queries(1, "24h"))
    assert {"node_cpu_seconds_total", "node_memory_MemAvailable_bytes"} <= set(names)
    assert "DCGM_FI_DEV_GPU_TEMP" in names
    # Functions and label names are not metrics.
    assert not {"rate", "avg", "sum", "mode", "node"} & set(names)


def test_a_counter_runs_back_at_its_rate_and_never_below_zero() -> None:
    live = {
        "metric": {"__name__": "x_total", "node": "1"},
        "values": [1000.0, 1030.0, 1060.0],
        "timestamps": [600_000, 615_000, 630_000],
    }
    made = history(live, end_ms=600_000, interval=INTERVAL)
    values, stamps = made["values"], made["timestamps"]
    assert len(values) == len(stamps) == POINTS
    assert stamps[-1] == 600_000 - INTERVAL * 1000 and stamps[0] == 600_000 - DAY * 1000
    assert values == sorted(values) and min(values) == 0.0
    assert values[-1] == pytest.approx(1000 - 30)  # one interval before the first live one
    assert made["metric"] == live["metric"]


def test_a_gauge_keeps_its_last_value_with_a_daily_swing() -> None:
    live = {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP"}, "values": [40.0, 50.0],
            "timestamps": [DAY * 1000, DAY * 1000 + 15_000]}  # fmt: skip
    values = history(live, end_ms=DAY * 1000, interval=INTERVAL)["values"]
    assert 50 * (1 - DAY_SWING) <= min(values) < 50 < max(values) <= 50 * (1 + DAY_SWING)


@pytest.fixture()
def store(tmp_path):
    if not shutil.which("victoria-metrics"):
        pytest.skip("Debian's victoria-metrics package is needed")
    url = f"http://127.0.0.1:{free_port()}"
    proc = _serve(
        ["victoria-metrics", f"-storageDataPath={tmp_path / 'data'}", "-search.latencyOffset=1s",
         f"-httpListenAddr={url.removeprefix('http://')}"],
        url, tmp_path / "store.log",
    )  # fmt: skip
    yield url
    proc.terminate()
    proc.wait(30)


def _live(url: str, since_ms: int) -> None:
    """Four minutes scraped from nodes 1 to 3: a counter and a gauge each."""
    stamps = [since_ms + k * 15_000 for k in range(16)]
    lines = [
        {"metric": {"__name__": name, "node": str(node), "job": "sys-exporter"},
         "values": [start + 5 * k for k in range(16)], "timestamps": stamps}
        for node in (1, 2, 3)
        for name, start in (("node_cpu_seconds_total", 9000.0), ("DCGM_FI_DEV_GPU_TEMP", 45.0))
    ]  # fmt: skip
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/api/v1/import", body), timeout=10)


def test_the_store_answers_a_day_for_the_nodes_given_one_and_none_for_the_others(store) -> None:
    since = time.time() - 300
    _live(store, int(since * 1000))
    names = ["DCGM_FI_DEV_GPU_TEMP", "node_cpu_seconds_total"]
    wait_for(lambda: len(query(store, '{node=~"1|2|3"}')) == 6, timeout=30, what="live rows")
    series, samples, seconds = load_day(store, names, [1, 2], since - 60, INTERVAL)
    assert (series, samples) == (4, 4 * POINTS) and seconds > 0
    counts = sorted(
        (name, r["metric"]["node"], float(r["value"][1]))
        for name in names
        for r in query(store, f'count_over_time({name}{{node=~"1|2|3"}}[1d])', since - 1)
    )
    assert counts == [(name, node, POINTS) for name in names for node in "12"], counts
    # The counter rises through the day into its live value, so rates stay sane.
    rate = query(store, 'rate(node_cpu_seconds_total{node="1"}[1h])', since - 3 * 3600)
    assert float(rate[0]["value"][1]) == pytest.approx(5 / 15, rel=0.01)


def test_a_node_the_store_has_no_sample_of_is_said(store) -> None:
    with pytest.raises(RuntimeError, match='node=~"42"'):
        load_day(store, ["DCGM_FI_DEV_GPU_TEMP"], [42], time.time() - 600, INTERVAL)
