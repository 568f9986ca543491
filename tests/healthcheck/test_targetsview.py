"""The targets view of scale-out mode (healthcheck.targetsview) over real HTTP servers.

One real vmagent (Debian's) with two targets, a second scraper port where nothing
listens, and a store URL where nothing listens either; tests/maccli/test_scaleout.py
runs the whole scale-out master.
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

from testkit.ports import free_port
from testkit.waiting import wait_for

pytestmark = pytest.mark.skipif(not shutil.which("vmagent"), reason="Debian's vmagent is missing")


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


@pytest.fixture
def view(tmp_path):
    scraper, scraper_url = _vmagent(tmp_path, ["1", "3"])
    wait_for(lambda: _answers(f"{scraper_url}/health"), timeout=30, what="vmagent")
    dead = f"http://127.0.0.1:{free_port()}"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "healthcheck.targetsview", "--listen", f"127.0.0.1:{port}",
         "--store", f"http://127.0.0.1:{free_port()}",
         "--scraper", scraper_url, "--scraper", dead],
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(f"{url}/-/ready"), timeout=30, what="the targets view")
    yield url, dead
    for running in (proc, scraper):
        running.terminate()
        running.wait(10)


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
