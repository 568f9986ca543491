"""vmalert's copy of MAC's rules answers as Prometheus's does, in a real VictoriaMetrics.

MetricsQL's increase(), changes() and delta() count a young series' first value as a
rise from zero; PromQL's do not. The rendered copy spells them increase_prometheus()...
(scraping.promconfig.with_promql_meaning). Here a store holds a few minutes of a healthy
node whose counters have old errors: the rules as Prometheus has them fire in the store
(the false page this guards against), vmalert's copy does not, and a counter that does
rise fires in both.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from scraping.promconfig import render_alert_rules, with_promql_meaning
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.scraping.test_engines import _serve

LABELS = {"node": "7", "hostname": "gpu-7", "maintenance": "false", "cluster_name": "mac"}
PORT = {**LABELS, "device": "mlx5_0", "port": "1"}
GPU = {**LABELS, "gpu": "0", "UUID": "GPU-7-0"}


def rules_of(text: str) -> dict[str, str]:
    return {
        rule["alert"]: rule["expr"]
        for group in yaml.safe_load(text)["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def test_only_the_functions_that_differ_are_respelled():
    promql, metricsql = (
        rules_of(render_alert_rules({})),
        rules_of(render_alert_rules({}, metricsql=True)),
    )
    assert promql.keys() == metricsql.keys()
    respelled = {name for name in promql if promql[name] != metricsql[name]}
    assert {"RdmaPortErrorsRising", "GpuEccUncorrectableErrors", "GpuXidError"} <= respelled
    for name, expr in metricsql.items():
        assert not re.search(r"\b(increase|changes|delta)\(", expr), name
        assert re.sub(r"\b(increase|changes|delta)_prometheus\(", r"\1(", expr) == promql[name]
    assert with_promql_meaning("rate(x[5m]) + increase(y[5m])") == (
        "rate(x[5m]) + increase_prometheus(y[5m])"
    )
    assert "vmalert" in render_alert_rules({}, metricsql=True).splitlines()[0]


@pytest.fixture(scope="module")
def young_store(tmp_path_factory):
    """A store holding the last 4 minutes of one node, every 15 s."""
    if not shutil.which("victoria-metrics"):
        pytest.skip("Debian's victoria-metrics package is needed")
    folder = tmp_path_factory.mktemp("young-store")
    url = f"http://127.0.0.1:{free_port()}"
    proc = _serve(
        ["victoria-metrics", f"-storageDataPath={folder / 'data'}", "-search.latencyOffset=1s",
         "-search.disableCache", f"-httpListenAddr={url.removeprefix('http://')}"],
        url, folder / "store.log",
    )  # fmt: skip
    series = [
        # Old errors, standing still: a healthy port and a healthy GPU.
        ("node_infiniband_link_error_recovery_total", PORT, [2] * 16),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, [1] * 16),
        ("DCGM_FI_DEV_XID_ERRORS", GPU, [0] * 16),
        # A port whose errors do rise: both copies must fire for it.
        ("node_infiniband_symbol_error_total", {**PORT, "device": "mlx5_1"}, [3] * 8 + [9] * 8),
    ]
    import_minutes(url, series)
    wait_for(lambda: len(query(url, '{node="7"}')) == 4, timeout=30, what="the import")
    yield url
    proc.terminate()
    proc.wait(30)


def import_minutes(url: str, series: list[tuple[str, dict, list[float]]]) -> list[int]:
    """Give the store the last 4 minutes of each (name, labels, 16 values), one value per
    15 s, by its import API; the timestamps (ms), oldest first."""
    now = int(time.time()) * 1000
    stamps = [now - 240_000 + step * 15_000 for step in range(16)]
    body = "".join(
        json.dumps({"metric": {"__name__": name, **labels}, "values": values,
                    "timestamps": stamps}) + "\n"
        for name, labels, values in series
    ).encode()  # fmt: skip
    urllib.request.urlopen(urllib.request.Request(f"{url}/api/v1/import", body), timeout=10)
    return stamps


def query(url: str, expr: str, at: float | None = None) -> list[dict]:
    """The store's instant answer to `expr` (now, or at unix time `at`)."""
    q = urllib.parse.urlencode({"query": expr, **({"time": f"{at:.3f}"} if at else {})})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=30) as answer:
        return json.load(answer)["data"]["result"]


def firing_devices(url: str, expr: str) -> set[str]:
    return {r["metric"].get("device") or r["metric"].get("gpu") for r in query(url, expr)}


def test_old_errors_page_nobody_and_new_ones_do(young_store):
    promql, metricsql = (
        rules_of(render_alert_rules({})),
        rules_of(render_alert_rules({}, metricsql=True)),
    )
    # The rules as Prometheus loads them, asked of the store: the false pages.
    assert firing_devices(young_store, promql["RdmaPortErrorsRising"]) == {"mlx5_0", "mlx5_1"}
    assert firing_devices(young_store, promql["GpuEccUncorrectableErrors"]) == {"0"}
    # vmalert's copy: only the port whose errors rose.
    assert firing_devices(young_store, metricsql["RdmaPortErrorsRising"]) == {"mlx5_1"}
    assert firing_devices(young_store, metricsql["GpuEccUncorrectableErrors"]) == set()
    assert firing_devices(young_store, metricsql["GpuXidError"]) == set()


def test_the_offline_backstop_holds_in_the_store_as_in_prometheus(young_store):
    """MacNodeOffline's hold (tests/scraping/test_alert_rules.py, under promtool) in
    MetricsQL: a firing alert whose node has no mac_node_up is kept only while the
    master's scrape fails, for at most 2 minutes, and a pending one never."""
    expr = rules_of(render_alert_rules({}, metricsql=True))["MacNodeOffline"]
    master = {"job": "mac-master", "instance": "127.0.0.1:28080"}
    alert = {"alertname": "MacNodeOffline", "severity": "critical", "cluster_name": "mac",
             "down_since": "2026-12-05T10:00:00Z"}  # fmt: skip
    series = [
        ("up", master, [1] * 4 + [0] * 12),  # the master's scrape fails from the 5th
        ("ALERTS", {**alert, "alertstate": "firing", "node": "10", "hostname": "gpu-10"},
         [1] * 16),
        ("ALERTS", {**alert, "alertstate": "pending", "node": "11", "hostname": "gpu-11"},
         [1] * 16),
        # gpu-12 is back: the worker's sweep put its sys-exporter back in the targets,
        # scraped from the 7th step on; its held alert ends there.
        ("ALERTS", {**alert, "alertstate": "firing", "node": "12", "hostname": "gpu-12"},
         [1] * 16),
        ("up", {"job": "sys-exporter", "instance": "198.18.0.12:29101", "node": "12"},
         [0] * 6 + [1] * 10),
    ]  # fmt: skip
    stamps = import_minutes(young_store, series)
    wait_for(
        lambda: len(query(young_store, 'ALERTS{alertname="MacNodeOffline"} or up')) == 5,
        timeout=30,
        what="the import",
    )

    def held(at_ms: int) -> set[str]:
        return {r["metric"]["hostname"] for r in query(young_store, expr, at=at_ms / 1000)}

    assert held(stamps[2]) == set()  # the master answers: its series alone decide
    assert held(stamps[5]) == {"gpu-10", "gpu-12"}  # it does not: the firing ones are kept
    assert held(stamps[8]) == {"gpu-10"}  # 75 s on; gpu-12's heartbeat is scraped again
    assert held(stamps[15]) == set()  # for 3 minutes: MacMasterDown's turn, not held
    # The labels of the master's post, less those the rule itself adds.
    [answer] = query(young_store, expr, at=stamps[8] / 1000)
    assert answer["metric"] == {"node": "10", "hostname": "gpu-10", "cluster_name": "mac",
                                "down_since": "2026-12-05T10:00:00Z"}  # fmt: skip
