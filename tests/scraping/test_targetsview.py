"""The targets view of scale-out mode (scraping.targetsview) over real HTTP servers.

One real vmagent (Debian's) with two targets, a second scraper port where nothing
listens, a real vmalert with one rule, and a store URL where nothing listens;
tests/maccli/test_scaleout.py runs the whole scale-out master.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from scraping import targetspages
from testkit.ports import free_port
from testkit.waiting import wait_for

pytestmark = pytest.mark.skipif(
    not (shutil.which("vmagent") and shutil.which("vmalert")),
    reason="Debian's victoria-metrics (vmagent, vmalert) is missing",
)


def _vmagent(tmp_path: Path, nodes: list[str]) -> tuple[subprocess.Popen, str]:
    """A real vmagent whose targets are nodes' sys-exporter addresses (nothing listens)."""
    config = {
        "scrape_configs": [
            {
                "job_name": "sys-exporter",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{free_port()}"], "labels": {"node": n}} for n in nodes
                ],
            }
        ]
    }
    (tmp_path / "scrape.yml").write_text(json.dumps(config))
    url = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        ["vmagent", f"-promscrape.config={tmp_path / 'scrape.yml'}",
         f"-remoteWrite.url=http://127.0.0.1:{free_port()}/api/v1/write",
         f"-remoteWrite.tmpDataPath={tmp_path / 'buffer'}",
         f"-httpListenAddr={url.removeprefix('http://')}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, url


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
        return True
    except OSError:
        return False


def _vmalert(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """A real vmalert with one rule group, its data source a port where nothing listens."""
    rules = {
        "groups": [{"name": "mac-test", "rules": [{"alert": "MacTestRule", "expr": "up == 0"}]}]
    }
    (tmp_path / "rules.yml").write_text(json.dumps(rules))
    url = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        ["vmalert", f"-rule={tmp_path / 'rules.yml'}",
         f"-datasource.url=http://127.0.0.1:{free_port()}",
         f"-notifier.url=http://127.0.0.1:{free_port()}",
         f"-httpListenAddr={url.removeprefix('http://')}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, url


@pytest.fixture
def view(tmp_path):
    scraper, scraper_url = _vmagent(tmp_path, ["1", "3"])
    rules, rules_url = _vmalert(tmp_path)
    wait_for(lambda: _answers(f"{scraper_url}/health"), timeout=30, what="vmagent")
    wait_for(lambda: _answers(f"{rules_url}/health"), timeout=30, what="vmalert")
    dead = f"http://127.0.0.1:{free_port()}"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "scraping.targetsview", "--listen", f"127.0.0.1:{port}",
         "--store", f"http://127.0.0.1:{free_port()}", "--rules", rules_url,
         "--scraper", scraper_url, "--scraper", dead],
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(f"{url}/-/ready"), timeout=30, what="the targets view")
    yield url, dead
    for running in (proc, scraper, rules):
        running.terminate()
        running.wait(10)


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=20) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/html")
        return answer.read().decode()


def test_it_merges_the_scrapers_and_names_one_that_is_down(view):
    url, dead = view
    with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=20) as answer:
        data = json.load(answer)["data"]
    assert sorted((t["labels"]["node"], t["scraper"]) for t in data["activeTargets"]) == [
        ("1", "0/2"),
        ("3", "0/2"),
    ]
    assert data["scrapers"][0] == {
        "scraper": "0/2",
        "url": data["scrapers"][0]["url"],
        "health": "up",
        "activeTargets": 2,
    }
    assert data["scrapers"][1]["health"] == "down" and data["scrapers"][1]["url"] == dead
    assert data["scrapers"][1]["lastError"]


def test_a_query_while_the_store_is_away_gets_a_503_that_says_so(view):
    url, _dead = view
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{url}/api/v1/query?query=up", timeout=20)
    assert caught.value.code == 503
    body = json.load(caught.value)
    assert body["status"] == "error" and "does not answer" in body["error"]


def test_the_targets_page_shows_the_fleets_targets_and_the_scraper_that_is_down(view):
    url, dead = view
    page = _page(f"{url}/targets")
    assert "<title>Targets" in page
    assert page.count('node="1"') == 1 and page.count('node="3"') == 1
    assert dead in page and "badge-offline" in page  # the scraper that does not answer
    assert 'href="rules"' in page and 'href="api/v1/targets"' in page  # relative links
    only_down = _page(f"{url}/targets?state=down")
    assert "No target matches" in only_down or 'node="1"' in only_down


def test_rules_and_alerts_come_from_the_rule_evaluator(view):
    url, _dead = view
    with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=20) as answer:
        groups = json.load(answer)["data"]["groups"]
    assert [g["name"] for g in groups] == ["mac-test"]
    assert "MacTestRule" in _page(f"{url}/rules")
    assert "<title>Alerts" in _page(f"{url}/alerts")


@pytest.mark.parametrize("path", ["/", "/graph"])
def test_the_index_says_where_everything_is(view, path):
    url, _dead = view
    page = _page(url + path)
    for link in ('href="targets"', 'href="rules"', 'href="alerts"', "api/v1/query"):
        assert link in page


def test_head_answers_as_get_does_without_a_body(view):
    url, _dead = view
    request = urllib.request.Request(f"{url}/targets", method="HEAD")
    with urllib.request.urlopen(request, timeout=20) as answer:
        assert answer.status == 200 and answer.read() == b""


def test_the_pages_escape_what_the_targets_carry():
    merged = {
        "data": {
            "activeTargets": [
                {"scrapeUrl": "http://x/<b>", "health": "down", "scraper": "0/1",
                 "labels": {"job": "<script>", "node": "1"}, "lastError": "<i>no</i>"},
            ],
            "scrapers": [{"scraper": "0/1", "url": "http://s", "health": "up", "activeTargets": 1}],
        }
    }  # fmt: skip
    page = targetspages.targets_page(merged).decode()
    assert "<script>" not in page and "<b>" not in page and "<i>" not in page
    assert "&lt;script&gt;" in page


def test_it_narrows_the_answer_to_a_state_and_a_job_as_prometheus_does(view):
    url, _dead = view

    def targets(query: str) -> dict:
        with urllib.request.urlopen(f"{url}/api/v1/targets?{query}", timeout=20) as answer:
            return json.load(answer)["data"]

    one_job = targets("state=active&scrapePool=sys-exporter")
    assert sorted(t["labels"]["node"] for t in one_job["activeTargets"]) == ["1", "3"]
    assert one_job["droppedTargets"] == []
    assert targets("state=active&scrapePool=nic-exporter")["activeTargets"] == []
    assert targets("state=dropped")["activeTargets"] == []
    # The scrapers' own health stays in every answer.
    assert [s["health"] for s in one_job["scrapers"]] == ["up", "down"]
