"""The scale bench's tunings: what each one changes in the engines' command lines."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import psutil
import pytest

from bench import hostpages
from bench.scale_metrics import (
    BARE_TARGETS,
    BASE,
    HOST_JOB,
    NO_RULES,
    STORE_SCRAPES,
    Engine,
    bare_targets,
    builtin_tuning,
    edited,
    fleet_rows,
    for_prometheus,
    job_groups,
    parse_tuning,
    scrapes_in_store,
)
from testkit.ports import check_contract_ports
from testkit.simfleet import node_addresses
from testkit.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
# The bench's host pages serve node_exporter's captured output (../shared/captures).
HOST_CAPTURE = hostpages.captures_dir() / hostpages.CAPTURE


def test_a_tuning_sets_drops_and_exports_what_it_names() -> None:
    name, edits = parse_tuning(
        "q=scraper:-remoteWrite.queues=1 store:!-search.latencyOffset rules:GOGC=50"
    )
    assert name == "q"
    argv, env = edited(["vmagent", "-remoteWrite.queues=4", "-x"], {}, edits, "scraper-0")
    assert argv == ["vmagent", "-x", "-remoteWrite.queues=1"] and env == {}
    argv, _ = edited(["vm", "-search.latencyOffset=5s"], {}, edits, "store")
    assert argv == ["vm"]
    _, env = edited(["vmalert"], {}, edits, "rules")
    assert env == {"GOGC": "50"}


@pytest.mark.parametrize("text", ["q", "q=", "q=nothing:-x=1", "q=store:GOGC"])
def test_a_tuning_that_says_nothing_clear_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--tuning"):
        parse_tuning(text)


def test_defaults_drop_every_flag_and_variable_mac_sets_for_cost() -> None:
    from maccli.master.scaleout import COST_ENV, COST_FLAGS

    edits = builtin_tuning("defaults")
    assert {(e.service, e.name) for e in edits if e.action == "drop"} == set(COST_FLAGS)
    assert {(e.service, e.name, e.value) for e in edits if e.action == "env"} == {
        (service, name, "") for service, name in COST_ENV
    }


def test_store_scrapes_gives_the_store_the_scraper_s_job(tmp_path) -> None:
    engine = Engine("vm", 1, tmp_path, 1, builtin_tuning(STORE_SCRAPES), store_scrapes=True)
    by_name = {spec.name: spec for spec in engine.engine_specs}
    # The scraper's prestart writes the configuration the store reads: it starts first.
    assert engine.engine_specs[0].name == "scraper-0"
    [config] = [a for a in by_name["scraper-0"].argv if a.startswith("-promscrape.config=")]
    store, _ = edited(by_name["store"].argv, {}, engine.edits, "store")
    assert config in store and "-promscrape.streamParse" in store
    scraper, _ = edited(by_name["scraper-0"].argv, {}, engine.edits, "scraper-0")
    assert not [a for a in scraper if a.startswith("-promscrape.config")]
    # The word among other edits: the store scrapes, with those edits' flags as well.
    tuning = parse_tuning("ss-nostale=store-scrapes store:-promscrape.noStaleMarkers")
    assert scrapes_in_store(tuning) and not scrapes_in_store(("mac", []))
    both = Engine("vm", 1, tmp_path / "both", 1, tuning[1], scrapes_in_store(tuning))
    by_name = {spec.name: spec for spec in both.specs}
    store, _ = edited(by_name["store"].argv, {}, both.edits, "store")
    assert f"-promscrape.config={tmp_path}/both/data/scaleout/scraper-0.yml" in store
    assert "-promscrape.noStaleMarkers" in store
    # Without the tuning, everything as MAC starts it.
    plain = Engine("vm", 1, tmp_path / "plain", 1, [])
    assert [s.name for s in plain.engine_specs] == ["store", "scraper-0", "rules", "prometheus"]
    assert plain.edits == []


def test_norules_gives_vmalert_no_rule_at_all(tmp_path) -> None:
    engine = Engine("vm", 1, tmp_path, 1, builtin_tuning(NO_RULES))
    [rules] = [spec for spec in engine.engine_specs if spec.name == "rules"]
    assert len([a for a in rules.argv if a.startswith("-rule=")]) == 2  # MAC's two files
    argv, _ = edited(rules.argv, {}, engine.edits, "rules")
    assert [a for a in argv if a.startswith("-rule=")] == [f"-rule={REPO}/bench/no_rules.yml"]
    assert "groups: []" in (REPO / "bench" / "no_rules.yml").read_text()


def test_bare_targets_keep_every_target_and_drop_only_mac_s_labels() -> None:
    tuning = (BARE_TARGETS, builtin_tuning(BARE_TARGETS))
    assert bare_targets(tuning) and not bare_targets(("mac", []))
    # It changes what both engines scrape; a vmagent flag only engine vm's run.
    assert for_prometheus(tuning) and for_prometheus(("mac", []))
    assert not for_prometheus(parse_tuning("q=scraper:-remoteWrite.queues=1"))
    rows = fleet_rows(3)
    full, bare = job_groups(rows), job_groups(rows, bare=True)
    assert set(bare) == set(full) and HOST_JOB in bare
    for job in full:
        assert [i for i, _ in bare[job]] == [i for i, _ in full[job]]
        for (_, mine), (_, theirs) in zip(full[job], bare[job], strict=True):
            mine, theirs = json.loads(mine), json.loads(theirs)
            assert theirs == {"labels": {}, "targets": mine["targets"]}
            assert mine["labels"]["node"] and mine["labels"]["hostname"]
    # No edit reaches an engine's command line: the targets are the change.
    for service in ("store", "scraper-0", "rules", "prometheus", "fleet"):
        assert edited(["engine", "-x=1"], {"A": "1"}, tuning[1], service) == (
            ["engine", "-x=1"],
            {"A": "1"},
        )


# The tests that run the bench itself: Prometheus and a 5-node fleet, for real.
BENCH_RUN = [
    pytest.mark.slow,
    pytest.mark.no_deadline,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus is needed"),
    pytest.mark.skipif(not HOST_CAPTURE.exists(), reason=f"no capture: {HOST_CAPTURE}"),
]


def bench_run(test):
    for mark in reversed(BENCH_RUN):
        test = mark(test)
    return test


def start_bench(tmp_path: Path, warmup: int, **output) -> subprocess.Popen:
    """The bench on Prometheus with 5 nodes and one run, its files under tmp_path."""
    check_contract_ports(node_addresses(5, BASE))  # its fleet's; not beside a MAC agent's
    return subprocess.Popen(
        [sys.executable, "-m", "bench.scale_metrics", "--engines", "prometheus", "--sizes", "5",
         "--runs", "1", "--warmup", str(warmup), "--window", "10"],
        cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)}, **output,
    )  # fmt: skip


@bench_run
def test_a_killed_bench_leaves_no_engine_and_no_fleet_behind(tmp_path) -> None:
    bench = start_bench(tmp_path, 120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        parent = psutil.Process(bench.pid)

        def started() -> list[psutil.Process]:
            children = parent.children(recursive=True)
            names = " ".join(" ".join(command_line(child)) for child in children)
            return children if "simfleet" in names and "prometheus" in names else []

        children = wait_for(started, timeout=120, interval=0.5, what="the fleet and the engine")
        bench.terminate()
        assert bench.wait(timeout=60) == 143
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, [" ".join(command_line(child)) for child in alive]
    finally:
        if bench.poll() is None:
            bench.kill()


@bench_run
def test_an_engine_that_dies_mid_run_is_named_with_its_log_kept(tmp_path) -> None:
    bench = start_bench(tmp_path, 30, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        parent = psutil.Process(bench.pid)

        def listening_engine() -> psutil.Process | None:
            for child in parent.children(recursive=True):
                if "--config.file" in " ".join(command_line(child)) and listens(child):
                    return child
            return None

        engine = wait_for(listening_engine, timeout=120, interval=0.5, what="the engine")
        time.sleep(5)  # past the bench's wait for it (polled every 0.5 s): into the warm-up
        engine.kill()
        out, _ = bench.communicate(timeout=180)
    finally:
        if bench.poll() is None:
            bench.kill()
    [failed] = [line for line in out.splitlines() if line.startswith("run failed:")]
    # The URL that refused, the process that went away, and where its log now is.
    assert "127.0.0.1:" in failed and "prometheus exited with -9" in failed, failed
    kept = Path(failed.split("logs kept in ")[1].rstrip(")"))
    assert (kept / "prometheus.log").read_text()


def test_a_named_section_is_written_beside_the_main_tables(tmp_path, monkeypatch) -> None:
    from bench import report, scale_metrics

    doc = tmp_path / "benchmarks.md"
    doc.write_text(report.HEADER)
    monkeypatch.setattr(
        scale_metrics, "update_section", lambda *a: report.update_section(*a, path=doc)
    )
    scale_metrics.write_section(argparse.Namespace(section=""), "main tables")
    scale_metrics.write_section(argparse.Namespace(section="tunings at 1,000 nodes"), "tunings")
    scale_metrics.write_section(argparse.Namespace(section=""), "main tables again")
    text = doc.read_text()
    assert "## Metrics at scale: tunings at 1,000 nodes" in text and "\ntunings\n" in text
    assert "main tables again" in text and "\nmain tables\n" not in text


def command_line(process: psutil.Process) -> list[str]:
    """Its command line; none for a child that exited while looked at."""
    try:
        return process.cmdline()
    except psutil.NoSuchProcess:  # a zombie too
        return []


def listens(process: psutil.Process) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN for c in process.net_connections())
    except psutil.NoSuchProcess:
        return False


def test_the_24_hour_charts_and_the_day_behind_them_are_reported_for_the_store() -> None:
    from bench.scale_metrics import Sample, report

    def sample(engine: str, **day) -> Sample:
        procs = {"store (victoria-metrics)": (0.4, 2**30), "fleet: simfleet": (0.1, 2**28)}
        return Sample(engine, "mac", 1000, 4000, 0, 0, 2e6, 139e3, procs, 0.4, (1.0, 1.0, 1.0),
                      [2.0, 4.0], 0.1, 1.5, 30.0, **day)  # fmt: skip

    store = sample("vm (1 scraper)", chart_day_ms=[8.0, 12.0, 40.0], day_samples=1_681_920,
                   day_import_s=7.2, backlog_bytes=3 * 2**20)  # fmt: skip
    args = argparse.Namespace(sizes="1000", runs=1, engines="vm,prometheus", tuning=[],
                              warmup=60, window=60, from_json=[])  # fmt: skip
    text = report({("vm", "mac"): [[store]], ("prometheus", "mac"): [[sample("prometheus")]]}, args)
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if "| 1,000 | 1 |" in line}
    assert rows["| vm (1 scraper)"].endswith("| 3 / 4 | 12 / 40 |"), rows
    assert rows["| prometheus"].endswith("| 3 / 4 | not measured |"), rows
    assert "| vm (1 scraper) | mac | 1,000 | 1.500 | 0.100 | 1,681,920, 7 s | 3 |" in text


def test_rows_name_the_engine_version_and_the_report_the_packages_run(tmp_path) -> None:
    from bench.scale_metrics import Engine, Sample, programs_line
    from testkit.debian_release import MANIFEST

    # Programs unpacked from another release, as testkit.debian_release leaves them.
    root = tmp_path / "trixie" / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    entry = {"package": "victoria-metrics", "version": "1.112.0+ds1-2", "release": "trixie"}
    (root / MANIFEST).write_text(json.dumps(
        {f"/usr/bin/{p}": entry for p in ("victoria-metrics", "vmagent", "vmalert")}
    ))  # fmt: skip
    env = {
        "MAC_VICTORIA_METRICS_BIN": str(root / "usr/bin/victoria-metrics"),
        "MAC_VMAGENT_BIN": str(root / "usr/bin/vmagent"),
        "MAC_VMALERT_BIN": str(root / "usr/bin/vmalert"),
    }
    with mock.patch.dict(os.environ, env):
        engine = Engine("vm", 1, tmp_path / "work", 1, [])
    assert engine.name == "vm 1.112.0 (1 scraper)"
    newer = "victoria-metrics 1.112.0+ds1-2 (Debian trixie)"
    assert engine.programs == {
        "store (victoria-metrics)": newer, "scraper-0": newer, "rules (vmalert)": newer
    }  # fmt: skip
    hosts = Engine("prometheus", 0, tmp_path / "host", 1, [])
    assert hosts.name.startswith("prometheus 2.") and hosts.programs["prometheus"].endswith(
        "(this host's)"
    )

    def sample(engine: Engine) -> Sample:
        return Sample(engine.name, "mac", 1000, 4000, 0, 0, 2e6, 139e3, {}, 0.4, (1.0, 1.0, 1.0),
                      programs=engine.programs)  # fmt: skip

    line = programs_line({("vm", "mac"): [sample(engine)], ("prometheus", "mac"): [sample(hosts)]})
    assert line.startswith(
        f"Programs: vm 1.112.0 (1 scraper): {newer} (store (victoria-metrics), scraper-0, "
        "rules (vmalert)); prometheus 2."
    ), line
    # Runs saved before versions were recorded say nothing rather than something wrong.
    assert programs_line({("vm", "mac"): [Sample("vm (1 scraper)", "mac", 1, 1, 0, 0, 1, 1, {},
                                                 0.1, (0, 0, 0))]}) == ""  # fmt: skip
