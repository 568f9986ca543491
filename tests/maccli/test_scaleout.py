"""Scale-out mode end to end: MAC_SCRAPE_SHARDS=2 over a simulated fleet of 40 nodes.

`mac start master` (process runtime) runs two vmagent scrapers, one victoria-metrics
store and vmalert from Debian's victoria-metrics package, with gunicorn, Celery, nginx
and Alertmanager, all on free loopback ports; the nodes are testkit.simfleet's, and
notifications go to a webhook receiver. Short intervals through MAC's own settings.

The same master, behind its real front door and gate, holds against a plain reader
who tries every write and maintenance endpoint of the store in every spelling
(testkit.metrics_writes), and serves what Grafana asks.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from scraping.engines import SCRAPER_JOB
from scraping.httpsd import shard_of
from testkit.alerting import WebhookReceiver
from testkit.alertstack import ADMIN_PASSWORD, AlertStack
from testkit.browser import CHROMIUM, chromium_page, dead_links
from testkit.debian_release import fetch, mac_settings
from testkit.metrics_writes import PROBE, datasource_reads, send, spelled_writes
from testkit.ports import free_port
from testkit.processes import exited
from testkit.simfleet import FleetThread, loopback_base, register_fleet
from testkit.waiting import http_status, wait_for

NODES = 40
SHARDS = 2
# Series written straight into the store: only a deletion could take them away.
CANARIES = 20
WRITES = spelled_writes()

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

    def series(self, metric: str) -> int:
        """How many series of `metric` the store holds (asked on its loopback)."""
        query = urllib.parse.urlencode({"match[]": metric})
        return len(self.master.get_json(f"{self.store}/api/v1/series?{query}")["data"])

    @property
    def rules(self) -> str:
        return f"http://127.0.0.1:{self.master.settings['MAC_RULES_PORT']}"

    def store_key(self, flag: str) -> str:
        keys = self.master.root / "data" / "scaleout" / "store-keys"
        return (keys / flag).read_text().strip()


def _programs(release: str, tmp_path_factory) -> dict[str, str]:
    """MAC_*_BIN for Debian `release`'s VictoriaMetrics, unpacked beside the host's ({} for
    the host's own): a site on Debian 13 runs 1.112 where this machine has 1.79."""
    if not release:
        return {}
    try:
        root = fetch(release, ["victoria-metrics"], Path(tmp_path_factory.mktemp("debian")))
    except RuntimeError as exc:
        pytest.skip(f"Debian {release}'s victoria-metrics could not be fetched: {exc}")
    return mac_settings(root, ["victoria-metrics"])


# Every test of the module runs on this host's VictoriaMetrics (bookworm's 1.79) and on
# Debian 13's (trixie's 1.112): MAC's flags, rules and views must hold on both.
@pytest.fixture(scope="module", params=["", "trixie"], ids=["vm-host", "vm-trixie"])
def scale(request, tmp_path_factory) -> Iterator[ScaleOut]:
    programs = _programs(request.param, tmp_path_factory)
    webhook = WebhookReceiver()
    # sys-manager too: a target whose scrape can fail while MAC's probe (/health) answers.
    services = ("sys-exporter", "nic-exporter", "sys-manager")
    fleet = FleetThread(NODES, base=loopback_base(), services=services).start()
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
            # Scale-out's own rule takes the setting too (its shipped `for:` is 30 s).
            "MAC_ALERT_FOR": "MacNodeOffline=2s,MacScraperDown=4s",
            "MAC_ALERT_GROUP_WAIT": "1s",
            "MAC_ALERT_GROUP_INTERVAL": "2s",
            "MAC_ALERT_POLL_INTERVAL": "1",
            "MAC_ALERT_WEBHOOK_URL": webhook.url,
            **programs,
        },
    )
    try:
        master.started = master.start()
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


@pytest.fixture(scope="module")
def reader(scale) -> str:
    """The API token of a plain user: no staff flag, no permission."""
    return scale.master.api_token("reader")


@pytest.fixture(scope="module")
def canaries(scale) -> int:
    lines = "".join(f'mac_gate_canary{{i="{i}"}} 1\n' for i in range(CANARIES)).encode()
    request = urllib.request.Request(
        f"{scale.store}/api/v1/import/prometheus", data=lines, method="POST"
    )
    urllib.request.urlopen(request, timeout=10).close()
    wait_for(lambda: scale.series("mac_gate_canary") == CANARIES, what="the canary series")
    return CANARIES


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize(("name", "attempt", "uri"), WRITES, ids=[w[0] for w in WRITES])
def test_a_reader_writes_nothing_to_the_store_in_any_spelling(
    scale, reader, canaries, name, attempt, uri, method
):
    status, body = send(scale.master.url, reader, method, uri, attempt.body, attempt.content_type)
    # The gate's refusal, with its reason: the store never saw the request.
    assert status == 403, (status, body[:300])
    assert body.strip()
    assert scale.series("mac_gate_canary") == canaries


def test_nothing_a_reader_tried_reached_the_store(scale, canaries):
    assert scale.series("mac_gate_canary") == canaries
    assert scale.series(PROBE) == 0  # no import, write or tag registration got through
    key = scale.store_key("snapshotAuthKey")
    snapshots = scale.master.get_json(f"{scale.store}/snapshot/list?authKey={key}")
    assert snapshots["snapshots"] == []


def test_the_store_itself_refuses_deletion_without_its_key(scale, canaries):
    """Whoever reaches the store's loopback port still needs the key MAC keeps."""
    delete = f"{scale.store}/api/v1/admin/tsdb/delete_series?match[]=mac_gate_canary"
    for wrong in ("", "&authKey=guess"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(delete + wrong, timeout=10)
        assert b"authKey" in refused.value.read()
    assert scale.series("mac_gate_canary") == canaries
    key = scale.store_key("deleteAuthKey")
    nothing = f"{scale.store}/api/v1/admin/tsdb/delete_series?match[]=mac_no_such&authKey={key}"
    with urllib.request.urlopen(nothing, timeout=10) as answer:
        assert answer.status == 204


@pytest.mark.parametrize("read", datasource_reads(), ids=lambda read: read.name)
def test_a_reader_gets_what_grafana_asks(scale, reader, read):
    status, body = send(
        scale.master.url, reader, read.method, f"/prometheus{read.target}", read.body
    )
    assert status == 200, body[:300]
    assert json.loads(body)["status"] == "success"


def test_prometheus_targets_shows_the_fleets_targets(scale, reader):
    """The page `mac start master` prints and the navigation bar links: every node's
    targets from both scrapers, not the store's own scrape of the scrapers."""
    status, body = send(scale.master.url, reader, "GET", "/prometheus/targets")
    page = body.decode()
    assert status == 200 and "<title>Targets" in page
    for node in scale.scraper_nodes(0) | scale.scraper_nodes(1):
        assert f'node="{node}"' in page
    assert ">0/2<" in page and ">1/2<" in page
    assert f'job="{SCRAPER_JOB}"' not in page
    # Rules come from vmalert, as Grafana and the Rules page read them.
    status, body = send(scale.master.url, reader, "GET", "/prometheus/api/v1/rules")
    names = [r["name"] for g in json.loads(body)["data"]["groups"] for r in g["rules"]]
    assert status == 200 and "MacNodeOffline" in names


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_every_link_people_follow_lands_on_a_useful_page(scale):
    """In Chromium: what `mac start master` printed, the navigation bar, and the pages
    people open at /prometheus/ (the targets view's) and /alertmanager/."""
    with chromium_page() as page:
        started = scale.master.started.stdout
        dead = dead_links(page, started, "admin", ADMIN_PASSWORD, scale.master.prom_port)
        page.goto(f"{scale.master.url}/prometheus/targets")
        node = sorted(scale.scraper_nodes(1))[0]
        assert f'node="{node}"' in page.inner_text("main")
    assert dead == {}, "\n".join(dead.values())


def test_the_node_page_names_a_scrape_error_of_a_scraper(scale):
    """Scrape health: `up` from the store, the last error from the scrapers' targets view
    (MAC_TARGETS_URL): the store knows no targets."""
    # A node's sys-manager answers MAC's probe (/health) but its /metrics is a 404.
    node = next(n for n in scale.fleet.nodes if "sys-manager" in n.ports)
    node_id = scale.nodes[node.hostname]["id"]
    port = node.ports["sys-manager"]
    page = scale.fleet.loop_call(port.others.pop, b"/metrics")
    try:

        def sys_manager() -> dict:
            answer = scale.admin.get_json(f"/nodes/{node_id}/scrapes.json")
            return answer["jobs"].get("sys-manager") or {}

        job = wait_for(
            lambda: (found := sys_manager()).get("health") == "down" and found,
            timeout=60,
            interval=1,
            what="the scrape error on the node page",
        )
        assert "404" in job["error"], job
        assert scale.admin.get_json(f"/nodes/{node_id}/scrapes.json")["jobs"]["sys-exporter"] == {
            "health": "up",
            "error": "",
        }
    finally:
        scale.fleet.loop_call(port.others.__setitem__, b"/metrics", page)


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


def test_a_node_back_online_is_scraped_again_while_the_api_is_down(scale):
    index = 7
    node = scale.fleet.nodes[index]
    node_id = scale.nodes[node.hostname]["id"]
    shard = shard_of(node_id, SHARDS)
    scale.fleet.set_node_mode(index, "refuse")
    wait_for(lambda: str(node_id) not in scale.scraper_nodes(shard), timeout=60,
             what="the dead node out of its scraper's targets")  # fmt: skip
    # The API server (gunicorn and its workers, one process group) stops answering; the
    # worker's sweeps go on, and the scrapers read the files those sweeps write.
    group = os.getpgid(scale.master.service_pid("api-server"))
    os.killpg(group, signal.SIGSTOP)
    try:
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{scale.master.url}/health", timeout=2)
        scale.fleet.set_node_mode(index, "answer")
        wait_for(lambda: str(node_id) in scale.scraper_nodes(shard), timeout=30, interval=0.5,
                 what="the node back in its scraper's targets with the API down")  # fmt: skip
        up = f'up{{job="sys-exporter",node="{node_id}"}}'
        wait_for(lambda: [r["value"][1] for r in scale.query(up)] == ["1"], timeout=30,
                 interval=0.5, what="its heartbeat scraped into the store again")  # fmt: skip
    finally:
        os.killpg(group, signal.SIGCONT)
    wait_for(lambda: http_status(f"{scale.master.url}/health", timeout=5) in (200, 503),
             timeout=60, what="the API answering again")  # fmt: skip


def test_vmalerts_end_of_one_incident_never_ends_the_next(scale):
    """Down, back, down again within vmalert's memory of the resolved alert: the rule's
    end of the first incident, which vmalert sends on, carries the first down_since, so
    the second incident's alert stays firing in Alertmanager and is never resolved."""
    index = 11
    host = scale.fleet.nodes[index].hostname

    def incidents(status: str) -> list[str]:
        return [
            alert["labels"]["down_since"]
            for note in scale.webhook.matching(lambda body: True)
            for alert in note.body["alerts"]
            if alert["status"] == status
            and alert["labels"].get("alertname") == "MacNodeOffline"
            and alert["labels"].get("hostname") == host
        ]

    try:
        scale.fleet.set_node_mode(index, "refuse")
        first = wait_for(lambda: incidents("firing"), timeout=90, interval=0.5,
                         what="the first incident's notification")[0]  # fmt: skip
        scale.fleet.set_node_mode(index, "answer")
        wait_for(lambda: first in incidents("resolved"), timeout=90, interval=0.5,
                 what="the first incident's end")  # fmt: skip
        scale.fleet.set_node_mode(index, "refuse")
        second = wait_for(lambda: [d for d in incidents("firing") if d != first], timeout=90,
                          interval=0.5, what="the second incident's notification")[0]  # fmt: skip
        # Several evaluation rounds (2 s) and group intervals (2 s) in which vmalert keeps
        # sending the first incident's end.
        time.sleep(15)
        query = urllib.parse.urlencode(
            [("filter", 'alertname="MacNodeOffline"'), ("filter", f'hostname="{host}"')]
        )
        held = scale.master.get_json(f"{scale.master.am_url}/api/v2/alerts?{query}")
        active = [a["labels"]["down_since"] for a in held if a["status"]["state"] == "active"]
        assert active == [second]
        assert second not in incidents("resolved")
        assert incidents("firing").count(second) == 1  # and paged once
    finally:
        scale.fleet.set_node_mode(index, "answer")
    # Back as it was for the tests after this one: scraped again by its scraper.
    node_id = str(scale.nodes[host]["id"])
    shard = shard_of(int(node_id), SHARDS)
    wait_for(lambda: node_id in scale.scraper_nodes(shard), timeout=60, what="the node back")


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


def test_vmalert_asks_for_answers_as_recent_as_the_store_gives_them(scale):
    """Debian 13's vmalert evaluates every rule as of -rule.evalDelay ago (30 s unless
    told); MAC gives it the store's latency. Debian 12's has no such flag, and ignores
    the variable (it still runs: the module's other tests)."""
    with urllib.request.urlopen(f"{scale.rules}/flags", timeout=10) as answer:
        flags = answer.read().decode()
    key = urllib.parse.quote(scale.store_key("flagsAuthKey"))
    with urllib.request.urlopen(f"{scale.store}/flags?authKey={key}", timeout=10) as answer:
        store_flags = answer.read().decode()
    assert '-search.latencyOffset="5s"' in store_flags, store_flags
    if scale.master.settings.get("MAC_VMALERT_BIN"):  # vm-trixie
        assert '-rule.evalDelay="5s"' in flags, flags
    else:
        assert "evalDelay" not in flags, flags


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
        # Its own alert, from the store's scrape of the scrapers, after its `for:` (4 s).
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
    wait_for(lambda: exited(pid), what="the stopped scraper gone")
    wait_for(
        lambda: _running_again(scale, pid) and scale.health()["checks"]["scrapers"]["ok"],
        timeout=90,
        interval=1,
        what="the scraper restarted by supervision",
    )
    wait_for(lambda: len(scale.scraper_nodes(1)) == targets, timeout=60, what="its targets back")
    assert "Metrics gap" not in scale.admin.get("/")
