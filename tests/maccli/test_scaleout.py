"""Scale-out mode end to end: MAC_SCRAPE_SHARDS=2 over a simulated fleet of 40 nodes.

`mac start master` (process runtime) runs two vmagent scrapers, one victoria-metrics
store and vmalert from Debian's victoria-metrics package, with gunicorn, Celery, nginx
and Alertmanager, all on free loopback ports; the nodes are testkit.simfleet's, and
notifications go to a webhook receiver. Short intervals through MAC's own settings.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from healthcheck.httpsd import shard_of
from testkit.alerting import WebhookReceiver
from testkit.alertstack import AlertStack
from testkit.ports import free_port
from testkit.simfleet import FleetThread, loopback_base, register_fleet
from testkit.waiting import wait_for

NODES = 40
SHARDS = 2

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not all(shutil.which(b) for b in ("victoria-metrics", "vmagent", "vmalert", "nginx")),
        reason="Debian's victoria-metrics (store, vmagent, vmalert) and nginx are needed",
    ),
]


def _free_pair() -> int:
    """A port P with P+1 free as well (the scrapers take consecutive ports)."""
    for _ in range(50):
        port = free_port()
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports on loopback")


class ScaleOut:
    def __init__(self, master: AlertStack, fleet: FleetThread, webhook: WebhookReceiver):
        self.master, self.fleet, self.webhook = master, fleet, webhook
        self.admin = master.admin()
        self.nodes = {
            n["hostname"]: n for n in self.admin.get_json("/api/v1/nodes/?limit=500")["results"]
        }

    @property
    def store(self) -> str:
        return f"http://127.0.0.1:{self.master.settings['MAC_METRICS_STORE_PORT']}"

    def scraper(self, index: int) -> str:
        return f"http://127.0.0.1:{int(self.master.settings['MAC_SCRAPER_BASE_PORT']) + index}"

    def query(self, promql: str) -> list[dict]:
        url = f"{self.store}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        return self.master.get_json(url)["data"]["result"]

    def scraper_nodes(self, index: int) -> set[str]:
        active = self.master.get_json(f"{self.scraper(index)}/api/v1/targets")["data"][
            "activeTargets"
        ]
        return {t["labels"]["node"] for t in active if "node" in t["labels"]}

    def health(self) -> dict:
        return self.master.get_json(f"{self.master.url}/health", timeout=10)


@pytest.fixture(scope="module")
def scale(tmp_path_factory) -> Iterator[ScaleOut]:
    webhook = WebhookReceiver()
    fleet = FleetThread(NODES, base=loopback_base()).start()
    master = AlertStack(
        Path(tmp_path_factory.mktemp("scale-out")),
        {
            "MAC_SCRAPE_SHARDS": str(SHARDS),
            "MAC_METRICS_STORE_PORT": str(free_port()),
            "MAC_SCRAPER_BASE_PORT": str(_free_pair()),
            "MAC_RULES_PORT": str(free_port()),
            "MAC_API_INTERNAL_PORT": str(free_port()),
            "MAC_PROBE_INTERVAL": "2",
            "MAC_PROBE_TIMEOUT": "1",
            "MAC_SCRAPE_INTERVAL": "2s",
            "MAC_ALERT_FOR": "MacNodeOffline=2s",
            "MAC_ALERT_GROUP_WAIT": "1s",
            "MAC_ALERT_GROUP_INTERVAL": "2s",
            "MAC_ALERT_POLL_INTERVAL": "1",
            "MAC_ALERT_WEBHOOK_URL": webhook.url,
        },
    )
    try:
        master.start()
        registered, errors = asyncio.run(register_fleet(fleet.fleet, master.url))
        assert registered == NODES and not errors
        stack = ScaleOut(master, fleet, webhook)
        wait_for(
            lambda: len(stack.scraper_nodes(0) | stack.scraper_nodes(1)) == NODES,
            timeout=120,
            interval=1,
            what="every node's targets on a scraper",
        )
        yield stack
    finally:
        master.stop()
        fleet.stop()
        webhook.close()


def test_each_scraper_has_a_disjoint_share_and_together_they_cover_the_fleet(scale):
    first, second = scale.scraper_nodes(0), scale.scraper_nodes(1)
    assert first and second
    assert not first & second
    assert first | second == {str(n["id"]) for n in scale.nodes.values()}
    # The guide's command on 29090 lists every target, each with its scraper.
    merged = scale.master.get_json(f"{scale.master.prom_url}/api/v1/targets")["data"]
    by_scraper = {}
    for target in merged["activeTargets"]:
        if target["labels"]["job"] != "mac-master":  # the master itself: scraper 0 only
            by_scraper.setdefault(target["scraper"], set()).add(target["labels"]["node"])
    assert by_scraper == {"0/2": first, "1/2": second}
    masters = [t["scraper"] for t in merged["activeTargets"] if t["labels"]["job"] == "mac-master"]
    assert masters == ["0/2"]
    assert [s["health"] for s in merged["scrapers"]] == ["up", "up"]
    shown = scale.master.mac("status", "master")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "scraper-0 (0/2, " in shown.stdout and f"{len(first)} nodes" in shown.stdout
    assert "scraper-1 (1/2, " in shown.stdout and f"{len(second)} nodes" in shown.stdout


def test_the_store_counts_every_online_node(scale):
    def counted() -> tuple[int, int]:
        online = scale.admin.get_json("/fleet.json")["counts"]["status"]["online"]
        result = scale.query('count(up{job="sys-exporter"} == 1)')
        return online, int(float(result[0]["value"][1])) if result else 0

    online, in_store = wait_for(
        lambda: (pair := counted())[0] == pair[1] == NODES and pair,
        timeout=120,
        interval=1,
        what="the store counting every Online node",
    )
    assert online == in_store == NODES
    # 29090 still answers PromQL: the targets view passes queries to the store.
    query = urllib.parse.urlencode({"query": 'count(up{job="sys-exporter"} == 1)'})
    answer = scale.master.get_json(f"{scale.master.prom_url}/api/v1/query?{query}")
    assert int(float(answer["data"]["result"][0]["value"][1])) == NODES


def test_a_node_chart_has_data_for_a_node_of_each_shard(scale):
    for index in range(SHARDS):
        node = sorted(scale.scraper_nodes(index))[0]
        chart = wait_for(
            lambda node=node: (
                (c := scale.admin.get_json(f"/nodes/{node}/charts/cpu.json?range=1h"))["series"]
                and c
            ),
            timeout=60,
            interval=1,
            what=f"data in node {node}'s chart (shard {index})",
        )
        assert chart["empty_reason"] is None
        assert any(v is not None for s in chart["series"] for v in s["values"])


def test_one_killed_node_notifies_exactly_once(scale):
    node = scale.fleet.nodes[3]
    scale.fleet.set_node_mode(3, "refuse")

    def firing() -> list:
        return scale.webhook.matching(
            lambda body: (
                body["status"] == "firing"
                and any(
                    a["labels"].get("alertname") == "MacNodeOffline"
                    and a["labels"].get("hostname") == node.hostname
                    for a in body["alerts"]
                )
            )
        )

    wait_for(firing, timeout=90, interval=0.5, what="the MacNodeOffline notification")
    # Rules are evaluated once (vmalert, against the store), the master's own post has the
    # same labels: several more evaluation and group intervals must not bring a second one.
    time.sleep(10)
    assert len(firing()) == 1


def _scraper_pid(scale: ScaleOut, index: int) -> int:
    path = scale.master.root / "state" / "master" / f"scraper-{index}.pid"
    return json.loads(path.read_text())["pid"]


def _running_again(scale: ScaleOut, old_pid: int) -> bool:
    """`mac status master` shows scraper-1 running and healthy, as another process."""
    shown = scale.master.mac("status", "master", timeout=60)
    # The services' table comes first; the scrapers' share lines after it.
    rows = [line.split() for line in shown.stdout.splitlines()]
    row = next((cells for cells in rows if cells[:1] == ["scraper-1"]), [])
    # status refreshes the pid files from what runs now.
    return row[1:3] == ["running", "ok"] and _scraper_pid(scale, 1) != old_pid


def test_a_killed_scraper_is_reported_while_away_and_comes_back(scale):
    pid = _scraper_pid(scale, 1)
    targets = len(scale.scraper_nodes(1))
    # Its share of the registered nodes (an Offline node has no targets but still a gap).
    share = sum(1 for node in scale.nodes.values() if shard_of(node["id"], SHARDS) == 1)
    # Stopped first, so that it stays away long enough to look at /health and the fleet
    # page; then killed, and supervision must start it again.
    os.kill(pid, signal.SIGSTOP)
    try:
        health = wait_for(
            lambda: (h := scale.health())["checks"]["scrapers"]["ok"] is False and h,
            timeout=30,
            interval=0.5,
            what="/health reporting the scraper's gap",
        )
        assert health["status"] == "degraded" and "scrapers" in health["degraded"]
        detail = health["checks"]["scrapers"]["detail"]
        assert "scraper 1/2" in detail and f"its {share} nodes have a gap" in detail
        assert "Metrics gap: scraper 1/2" in scale.admin.get("/")
        merged = scale.master.get_json(f"{scale.master.prom_url}/api/v1/targets", timeout=20)
        assert [s["health"] for s in merged["data"]["scrapers"]] == ["up", "down"]
        # Its own alert, from the store's scrape of the scrapers, after its `for: 30s`.
        wait_for(
            lambda: scale.webhook.matching(
                lambda body: (
                    body["status"] == "firing"
                    and any(
                        a["labels"].get("alertname") == "MacScraperDown"
                        and a["labels"].get("shard") == "1/2"
                        for a in body["alerts"]
                    )
                )
            ),
            timeout=120,
            interval=1,
            what="the MacScraperDown notification",
        )
    finally:
        os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie",
        what="the stopped scraper gone",
    )
    wait_for(
        lambda: _running_again(scale, pid) and scale.health()["checks"]["scrapers"]["ok"],
        timeout=90,
        interval=1,
        what="the scraper restarted by supervision",
    )
    wait_for(lambda: len(scale.scraper_nodes(1)) == targets, timeout=60, what="its targets back")
    assert "Metrics gap" not in scale.admin.get("/")
