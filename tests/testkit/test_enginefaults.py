"""Counting the scrapes a fault lost (testkit.enginefaults)."""

from __future__ import annotations

import pytest

from testkit.enginefaults import lost_samples, lost_scrapes


def _answer(*series: list[float]) -> dict:
    result = [{"metric": {"node": str(n)}, "values": [[at, "1"] for at in stamps]}
              for n, stamps in enumerate(series)]  # fmt: skip
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def test_every_scrape_there_loses_nothing():
    assert lost_samples(_answer([100, 103, 106, 109])["data"]["result"], 100, 109, 3) == 0


def test_a_gap_counts_the_scrapes_that_fit_in_it():
    # 103 and 106 missing: a 9 s gap at a 3 s interval.
    assert lost_samples(_answer([100, 109, 112])["data"]["result"], 100, 112, 3) == 2


def test_a_series_with_no_sample_in_the_window_lost_all_its_scrapes():
    asked = []

    def query(promql: str, at: float) -> dict:
        asked.append((promql, at))
        return _answer([100, 103, 106, 109, 112, 115])  # one node of three answers

    lost = lost_scrapes(query, 'up{job="x"}', 3, (100.0, 115.0), 3)
    # The two silent nodes: a 15 s window holds five 3 s scrapes of each.
    assert lost == 2 * 5
    assert asked == [('up{job="x"}[16s]', 115.0)]


def test_more_series_than_expected_is_a_mistake_in_the_selector():
    def query(promql: str, at: float) -> dict:
        return _answer([100], [100])

    with pytest.raises(AssertionError, match="node"):
        lost_scrapes(query, "up", 1, (100.0, 103.0), 3)
