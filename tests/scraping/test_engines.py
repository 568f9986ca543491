"""Scale-out mode's master side: the engines' files, and /health with a real store.

The store is Debian's victoria-metrics on a free port (one per module); a lost store
is a port where nothing listens, a full disk a MAC_METRICS_MIN_FREE_BYTES above what
the store reports free, a dead scraper a vmagent that was stopped.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from healthcheck import health
from inventory.models import Node
from scraping.engines import refresh_engine_checks
from scraping.httpsd import shard_of
from testkit.factories import make_node
from testkit.fakehttp import NotHttp
from testkit.ports import free_port
from testkit.waiting import wait_for

pytestmark = [
    pytest.mark.skipif(
        not (shutil.which("victoria-metrics") and shutil.which("vmagent")),
        reason="Debian's victoria-metrics package is needed",
    ),
]


def _serve(argv: list[str], url: str, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT)
    import urllib.request

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return True
        except OSError:
            return False

    wait_for(answers, timeout=60, what=f"{argv[0]} answering at {url}")
    return proc


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    url = f"http://127.0.0.1:{free_port()}"
    proc = _serve(
        ["victoria-metrics", f"-storageDataPath={folder / 'data'}",
         f"-httpListenAddr={url.removeprefix('http://')}"],
        url, folder / "store.log",
    )  # fmt: skip
    yield url
    proc.terminate()
    proc.wait(30)


@pytest.fixture
def scraper(tmp_path, store):
    config = tmp_path / "scrape.yml"
    config.write_text("scrape_configs: []\n")
    url = f"http://127.0.0.1:{free_port()}"
    proc = _serve(
        ["vmagent", f"-promscrape.config={config}", f"-remoteWrite.url={store}/api/v1/write",
         f"-remoteWrite.tmpDataPath={tmp_path / 'buffer'}",
         f"-httpListenAddr={url.removeprefix('http://')}"],
        url, tmp_path / "vmagent.log",
    )  # fmt: skip
    yield url, proc
    proc.kill()
    proc.wait(30)


@pytest.fixture(scope="module")
def rules(tmp_path_factory, store):
    """A real vmalert evaluating one rule against the store."""
    folder = tmp_path_factory.mktemp("rules")
    (folder / "rules.yml").write_text(
        "groups:\n  - name: g\n    rules:\n      - alert: Always\n        expr: vector(1)\n"
    )
    url = f"http://127.0.0.1:{free_port()}"
    proc = _serve(
        ["vmalert", f"-rule={folder / 'rules.yml'}", f"-datasource.url={store}",
         f"-notifier.url=http://127.0.0.1:{free_port()}",
         f"-httpListenAddr={url.removeprefix('http://')}"],
        url, folder / "vmalert.log",
    )  # fmt: skip
    yield url
    proc.terminate()
    proc.wait(30)


@pytest.fixture
def scale_out(settings, store, monkeypatch):
    # A master that has just started and not swept yet: "sweeps" stays green whatever
    # this process ran before (its start is minutes ago on a busy xdist worker).
    monkeypatch.setattr(health, "PROCESS_STARTED", time.time())
    settings.SCRAPE_SHARDS = 2
    settings.PROMETHEUS_URL = store
    settings.TARGETS_URL = store
    settings.RULES_URL = ""
    settings.METRICS_MIN_FREE_BYTES = 0
    return settings


def _health(client) -> dict:
    """/health right after a check of the engines (made here, in the test's transaction,
    where the background thread's own connection would not see the test's nodes)."""
    refresh_engine_checks()
    response = client.get("/health")
    assert response.status_code in (200, 503)
    return response.json()


@pytest.mark.django_db
def test_it_writes_a_scraper_config_per_shard_that_vmagent_accepts(tmp_path, settings):
    from testkit.factories import online_gpu_node

    settings.SD_TOKEN = ""  # the scrapers read files: no http_sd token needed
    settings.SCRAPE_INTERVAL = "5s"
    settings.SD_DIR = tmp_path / "targets"
    (settings.SD_DIR / "shard-0-of-3").mkdir(parents=True)  # MAC_SCRAPE_SHARDS was 3
    nodes = [online_gpu_node(f"gpu-{n:02d}", f"10.0.0.{n}") for n in range(1, 9)]
    for shard in (0, 1):
        out = tmp_path / f"scraper-{shard}.yml"
        call_command("scaleout_config", "--scraper", str(shard), "--of", "2",
                     "--master", "127.0.0.1:28080", "--out", str(out))  # fmt: skip
        config = yaml.safe_load(out.read_text())
        jobs = {job["job_name"]: job for job in config["scrape_configs"]}
        assert ("mac-master" in jobs) is (shard == 0)  # the master's series exist once
        (sd,) = jobs["sys-exporter"]["file_sd_configs"]
        folder = settings.SD_DIR / f"shard-{shard}-of-2"
        assert sd == {"files": [str(folder / "sys-exporter.json")]}
        # Its share is there before the first sweep at this number of scrapers, as the
        # inventory has it: no gap in the metrics while the worker catches up.
        listed = {
            g["labels"]["node"] for g in json.loads((folder / "sys-exporter.json").read_text())
        }
        assert listed == {str(n.pk) for n in nodes if shard_of(n.pk, 2) == shard}
        assert (folder / "bmc-agent.json").read_text() == "[]\n"  # a job none of them runs
        assert config["global"]["external_labels"] == {"mac_shard": f"{shard}/2"}
        # vmagent itself parses it strictly.
        checked = subprocess.run(
            ["vmagent", f"-promscrape.config={out}", "-dryRun"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr
    # The shares of the old number of scrapers are gone; nobody reads them.
    assert sorted(p.name for p in settings.SD_DIR.iterdir() if p.is_dir()) == [
        "shard-0-of-2", "shard-1-of-2",
    ]  # fmt: skip


def test_a_scraper_on_another_host_reads_the_masters_http_sd(tmp_path, settings):
    from django.core.management.base import CommandError

    settings.SD_TOKEN = "sd-token-for-tests"
    settings.SD_DIR = tmp_path / "targets"
    out = tmp_path / "remote" / "scraper-1.yml"
    out.parent.mkdir()
    call_command("scaleout_config", "--scraper", "1", "--of", "2", "--http-sd",
                 "--master", "master.example:28080", "--out", str(out))  # fmt: skip
    config = yaml.safe_load(out.read_text())
    (sd,) = {job["job_name"]: job for job in config["scrape_configs"]}["sys-exporter"][
        "http_sd_configs"
    ]
    assert sd["url"] == "http://master.example:28080/api/v1/sd/sys-exporter?shard=1&of=2"
    assert Path(sd["authorization"]["credentials_file"]).read_text() == "sd-token-for-tests"
    assert "refresh_interval" not in sd  # vmagent refuses it: its flag says how often
    assert not settings.SD_DIR.exists()  # no files of its own on the master's disk
    checked = subprocess.run(
        ["vmagent", f"-promscrape.config={out}", "-dryRun"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    settings.SD_TOKEN = ""
    with pytest.raises(CommandError, match="--http-sd reads the master's http_sd, which needs"):
        call_command("scaleout_config", "--scraper", "0", "--of", "2", "--http-sd",
                     "--master", "127.0.0.1:28080", "--out", str(out))  # fmt: skip


@pytest.mark.django_db
def test_it_names_a_bad_scraper_flag_and_an_unwritable_targets_folder(tmp_path, settings):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--scraper"):
        call_command("scaleout_config", "--scraper", "2", "--of", "2",
                     "--master", "127.0.0.1:28080", "--out", str(tmp_path / "s.yml"))  # fmt: skip
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    settings.SD_DIR = blocker / "targets"
    with pytest.raises(CommandError, match=r"cannot write the targets files in .*not-a-folder"):
        call_command("scaleout_config", "--scraper", "0", "--of", "2",
                     "--master", "127.0.0.1:28080", "--out", str(tmp_path / "s.yml"))  # fmt: skip


def _rule(path, name: str) -> dict:
    rules = yaml.safe_load(path.read_text())
    return next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == name)


def test_it_writes_rules_that_vmalert_loads(tmp_path, settings):
    settings.ALERT_FOR = "MacNodeOffline=5s,MacScraperDown=1m"
    settings.RUNBOOK_BASE_URL = "https://git.example/mac/blob/main/"
    call_command("scaleout_config", "--rules", str(tmp_path))
    offline = _rule(tmp_path / "alerts.yml", "MacNodeOffline")
    assert offline["for"] == "5s"
    assert offline["annotations"]["runbook_url"].startswith("https://git.example/mac/blob/main/")
    # Scale-out's own rules take both settings as well.
    scraper_down = _rule(tmp_path / "scaleout.yml", "MacScraperDown")
    assert scraper_down["for"] == "1m"
    assert scraper_down["annotations"]["runbook_url"] == (
        "https://git.example/mac/blob/main/docs/scaling.md#faults-and-what-says-so"
    )
    checked = subprocess.run(
        ["vmalert", f"-rule={tmp_path / 'alerts.yml'}", f"-rule={tmp_path / 'scaleout.yml'}",
         "-dryRun"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_shipped_scale_out_rule_keeps_its_own_for_without_the_setting(tmp_path, settings):
    settings.ALERT_FOR = ""
    call_command("scaleout_config", "--rules", str(tmp_path))
    assert _rule(tmp_path / "scaleout.yml", "MacScraperDown")["for"] == "30s"


def test_a_scale_out_rules_for_is_accepted_in_prometheus_mode_too(tmp_path, settings):
    """One MAC_ALERT_FOR for both modes: Prometheus's rules file has nothing to change."""
    settings.ALERT_FOR = "MacScraperDown=1m"
    call_command(
        "prometheus_config", "--out", str(tmp_path / "prometheus.yml"),
        "--sd-dir", str(tmp_path / "sd"), stdout=io.StringIO(),
    )  # fmt: skip
    assert "MacScraperDown" not in (tmp_path / "rules" / "alerts.yml").read_text()


def test_an_unknown_rule_in_the_setting_stops_the_rules_naming_it(tmp_path, settings):
    settings.ALERT_FOR = "MacScraperGone=1m"
    with pytest.raises(CommandError, match="MAC_ALERT_FOR: 'MacScraperGone' is not one of"):
        call_command("scaleout_config", "--rules", str(tmp_path))


@pytest.mark.django_db
def test_it_is_quiet_when_scale_out_is_off(client, settings):
    settings.SCRAPE_SHARDS = 0
    checks = _health(client)["checks"]
    assert "metrics_store" not in checks and "scrapers" not in checks


@pytest.mark.django_db
def test_it_reports_a_store_and_scrapers_that_answer(client, scale_out, scraper):
    scale_out.SCRAPER_URLS = [scraper[0], scraper[0]]
    body = _health(client)
    assert body["checks"]["metrics_store"]["ok"] is True
    assert "GiB free" in body["checks"]["metrics_store"]["detail"]
    assert body["checks"]["scrapers"] == {"ok": True, "detail": "2 scrapers answer"}
    assert "prometheus" not in body["checks"]  # there is none: the store is checked instead


@pytest.mark.django_db
def test_a_lost_store_degrades_health_with_the_reason(client, scale_out, scraper):
    scale_out.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    scale_out.SCRAPER_URLS = [scraper[0], scraper[0]]
    body = _health(client)
    # (Alertmanager, not running here, may be named too: tests/alerting covers it.)
    assert body["status"] == "degraded" and "metrics_store" in body["degraded"]
    assert "scrapers" not in body["degraded"]
    assert body["failed"] == []  # probing and the inventory do not need the store
    detail = body["checks"]["metrics_store"]["detail"]
    assert scale_out.PROMETHEUS_URL in detail and "does not answer" in detail


@pytest.mark.django_db
def test_a_nearly_full_store_disk_degrades_health(client, scale_out, scraper):
    scale_out.METRICS_MIN_FREE_BYTES = 2**62
    scale_out.SCRAPER_URLS = [scraper[0], scraper[0]]
    body = _health(client)
    assert "metrics_store" in body["degraded"] and "scrapers" not in body["degraded"]
    assert "MAC_METRICS_MIN_FREE_BYTES" in body["checks"]["metrics_store"]["detail"]


@pytest.mark.django_db
def test_a_dead_scraper_degrades_health_naming_its_share(client, scale_out, scraper):
    url, proc = scraper
    nodes = [make_node(hostname=f"n{i}") for i in range(12)]
    share = sum(1 for node in nodes if shard_of(node.id, 2) == 1)
    scale_out.SCRAPER_URLS = [url, url]
    assert _health(client)["checks"]["scrapers"]["ok"] is True
    proc.kill()
    proc.wait(30)
    time.sleep(0.2)
    body = _health(client)
    assert body["status"] == "degraded" and "scrapers" in body["degraded"]
    detail = body["checks"]["scrapers"]["detail"]
    assert f"scraper 1/2 at {url} does not answer" in detail
    assert f"its {share} nodes have a gap" in detail
    assert Node.objects.count() == 12


@pytest.mark.skipif(not shutil.which("promtool"), reason="Debian's promtool is missing")
def test_mac_scraper_down_fires_for_the_shard_that_is_down(tmp_path):
    """Only for the scraper whose `up` is 0, after its `for:`; promtool test rules."""
    from scraping.promconfig import SCALEOUT_RULES

    up = 'up{job="mac-scraper",instance="127.0.0.1:29431",shard="1/2"}'
    case = {
        "interval": "15s",
        "input_series": [
            {"series": up, "values": "1 1 0 0 0 0 0"},
            {"series": up.replace("29431", "29430").replace("1/2", "0/2"), "values": "1x6"},
        ],
        "alert_rule_test": [
            {"eval_time": "15s", "alertname": "MacScraperDown", "exp_alerts": []},
            {
                "eval_time": "75s",
                "alertname": "MacScraperDown",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "critical", "job": "mac-scraper",
                            "instance": "127.0.0.1:29431", "shard": "1/2",
                        },
                        "exp_annotations": {
                            "summary": "Scraper 1/2 of the master does not answer",
                            "description": (
                                "The vmagent scraper of shard 1/2 (127.0.0.1:29431) is down: the "
                                "nodes of its share have a gap in their metrics and charts until "
                                "it is back. `mac status master` shows it; supervision restarts "
                                "it, its log is `mac logs scraper-N`."
                            ),
                            "runbook_url": "docs/scaling.md#faults-and-what-says-so",
                        },
                    }
                ],
            },
        ],
    }  # fmt: skip
    tests = {"rule_files": [str(SCALEOUT_RULES)], "evaluation_interval": "15s", "tests": [case]}
    path = tmp_path / "scaleout_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    run = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.django_db
def test_health_answers_from_the_last_check_and_never_waits_for_the_next(
    client, scale_out, monkeypatch
):
    """A check that hangs (a frozen engine) holds its own thread, never the request."""
    import threading

    from scraping import engines

    away = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    scale_out.SCRAPER_URLS = [away, away]
    release, asked = threading.Event(), []

    def hanging_check() -> dict:
        asked.append(time.monotonic())
        release.wait(30)
        return {"metrics_store": (True, "answers"), "scrapers": (False, "scraper 1/2 frozen")}

    monkeypatch.setattr(engines, "check_engines", hanging_check)
    try:
        started = time.monotonic()
        first = client.get("/health").json()["checks"]
        second = client.get("/health").json()["checks"]
        took = time.monotonic() - started
        assert took < 1.0, took  # neither waited on the check under way
        assert first["scrapers"] == {"ok": True, "detail": "first check under way"}
        assert second["scrapers"] == first["scrapers"]
        wait_for(lambda: asked, timeout=10, what="the background check started")
        assert len(asked) == 1  # one check at a time, whoever reads
    finally:
        release.set()
    body = wait_for(
        lambda: "scrapers" in (b := _health_cached(client))["degraded"] and b,
        timeout=10,
        what="the check's answer in /health",
    )
    assert body["checks"]["scrapers"]["detail"] == "scraper 1/2 frozen"


@pytest.mark.django_db
def test_an_answer_nobody_could_renew_says_how_old_it_is(client, scale_out, monkeypatch):
    from scraping import engines

    scale_out.SCRAPER_URLS = [f"http://127.0.0.1:{free_port()}"]  # nothing listens there
    old = {"metrics_store": (True, "answers"), "scrapers": (True, "1 scrapers answer")}
    cache_at = time.time() - 120
    from django.core.cache import cache

    cache.set(engines._checks_key(), {"at": cache_at, "checks": old}, None)
    monkeypatch.setattr(engines, "_refresh_in_background", lambda: None)
    detail = _health_cached(client)["checks"]["scrapers"]["detail"]
    said = r"1 scrapers answer \(checked 12[01] s ago; no check has finished since\)"
    assert re.fullmatch(said, detail), detail


def _health_cached(client) -> dict:
    """/health as it answers, without checking the engines first."""
    return client.get("/health").json()


@pytest.mark.django_db
def test_vmalert_and_the_targets_view_are_watched_too(client, scale_out, scraper, rules):
    scale_out.SCRAPER_URLS = [scraper[0], scraper[0]]
    scale_out.RULES_URL = rules
    scale_out.TARGETS_URL = f"http://127.0.0.1:{free_port()}"  # the view is away
    body = _health(client)
    assert body["checks"]["rules"] == {"ok": True, "detail": f"answers at {rules}"}
    assert "targets_view" in body["degraded"] and "rules" not in body["degraded"]
    view = body["checks"]["targets_view"]["detail"]
    assert view.startswith(f"the targets view at {scale_out.TARGETS_URL} does not answer")

    scale_out.RULES_URL = f"http://127.0.0.1:{free_port()}"  # vmalert is away
    body = _health(client)
    assert "rules" in body["degraded"] and body["failed"] == []
    assert body["checks"]["rules"]["detail"].startswith(
        f"the rule evaluator (vmalert) at {scale_out.RULES_URL} does not answer"
    )


@pytest.fixture
def scale_out_without_engines(settings, monkeypatch):
    """Scale-out mode's settings, for tests that put their own servers at its URLs."""
    monkeypatch.setattr(health, "PROCESS_STARTED", time.time())
    settings.SCRAPE_SHARDS = 1
    settings.RULES_URL = ""
    settings.METRICS_MIN_FREE_BYTES = 0
    return settings


@pytest.mark.django_db
def test_a_store_that_does_not_speak_http_degrades_health(client, scale_out_without_engines):
    with NotHttp() as server:
        scale_out_without_engines.PROMETHEUS_URL = server.url
        scale_out_without_engines.TARGETS_URL = server.url
        scale_out_without_engines.SCRAPER_URLS = [server.url]
        body = _health(client)

    assert {"metrics_store", "scrapers"} <= set(body["degraded"])
    for name in ("metrics_store", "scrapers"):
        detail = body["checks"][name]["detail"]
        assert server.url in detail and "does not speak HTTP" in detail, detail


@pytest.mark.django_db
def test_a_check_that_raises_is_a_failed_answer_not_a_first_check_for_good(
    client, scale_out_without_engines, monkeypatch
):
    from scraping import engines

    away = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    scale_out_without_engines.PROMETHEUS_URL = away
    scale_out_without_engines.TARGETS_URL = away
    scale_out_without_engines.SCRAPER_URLS = [away]

    def broken() -> tuple[bool, str]:
        raise IndexError("list index out of range")

    monkeypatch.setattr(engines, "check_store", broken)
    monkeypatch.setattr(engines, "check_scrapers", broken)
    refresh_engine_checks()  # the background thread's work

    checks = _health_cached(client)["checks"]
    assert checks["metrics_store"] == {
        "ok": False,
        "detail": "the metrics store could not be checked (IndexError: list index out of "
        "range); mac status master",
    }
    assert checks["scrapers"]["ok"] is False
