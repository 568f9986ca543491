"""The http_sd endpoint: its token, file-SD's targets, stable disjoint shards, clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from inventory.models import Node
from scraping.httpsd import TARGET_FIELDS, parse_shard, shard_of
from scraping.targets import SCRAPED_SERVICES, render_targets
from testkit.factories import bulk_nodes, offline_node, online_gpu_node

TOKEN = "sd-token-for-tests"
pytestmark = pytest.mark.django_db


@pytest.fixture
def sd_token(settings):
    settings.SD_TOKEN = TOKEN
    return TOKEN


def get(client, job: str, query: str = "", token: str | None = TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.get(f"/api/v1/sd/{job}{query}", headers=headers)


def groups(response) -> list[dict]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)


def test_it_refuses_without_the_token(client, sd_token):
    online_gpu_node("gpu-1", "198.18.5.1")
    for token in (None, "wrong"):
        response = get(client, "sys-exporter", token=token)
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="mac-sd"'
        assert "MAC_SD_TOKEN" in response.json()["detail"]
    assert b"198.18.5.1" not in response.content


def test_it_stays_closed_while_no_token_is_set(client, settings):
    settings.SD_TOKEN = ""
    response = get(client, "sys-exporter", token="")
    assert response.status_code == 401
    assert "set MAC_SD_TOKEN on the master" in response.json()["detail"]


def test_it_serves_exactly_the_targets_files_content(client, sd_token):
    online_gpu_node("gpu-1", "198.18.5.1")
    online_gpu_node("gpu-2", "198.18.5.2", maintenance=True)
    offline_node("gpu-3", "198.18.5.3", exporter_health={"nic-exporter": True})
    files = render_targets(Node.objects.values(*TARGET_FIELDS))
    for job in SCRAPED_SERVICES:
        response = get(client, job)
        assert response.content == files[job], job
    # The offline node: no sys-exporter, but its answering nic-exporter stays a target.
    nic = groups(get(client, "nic-exporter"))
    assert [g["labels"]["hostname"] for g in nic] == ["gpu-3"]
    sys_targets = [g["targets"] for g in groups(get(client, "sys-exporter"))]
    assert sys_targets == [["198.18.5.1:29101"], ["198.18.5.2:29101"]]


def test_shards_split_the_targets_without_overlap(client, sd_token):
    bulk_nodes(60, exporters={"sys-exporter": 29101})
    everything = {g["targets"][0] for g in groups(get(client, "sys-exporter"))}
    assert len(everything) == 60
    shards = [
        {g["targets"][0] for g in groups(get(client, "sys-exporter", f"?shard={k}&of=3"))}
        for k in range(3)
    ]
    assert set().union(*shards) == everything
    assert sum(len(s) for s in shards) == 60  # disjoint
    assert all(10 <= len(s) <= 30 for s in shards)  # and roughly even


def test_a_node_keeps_its_shard_when_other_nodes_come_and_go(client, sd_token):
    first = bulk_nodes(30, exporters={"sys-exporter": 29101})

    def shard_by_node() -> dict[str, int]:
        found = {}
        for k in range(4):
            for group in groups(get(client, "sys-exporter", f"?shard={k}&of=4")):
                found[group["labels"]["node"]] = k
        return found

    before = shard_by_node()
    Node.objects.filter(pk__in=[node.pk for node in first[:10]]).delete()
    bulk_nodes(25, start=100, exporters={"sys-exporter": 29101})
    after = shard_by_node()
    stayed = set(before) & set(after)
    assert len(stayed) == 20
    assert {node: after[node] for node in stayed} == {node: before[node] for node in stayed}
    assert all(after[node] == shard_of(int(node), 4) for node in after)


def test_a_node_keeps_its_shard_when_its_ip_changes(client, sd_token):
    node = online_gpu_node("gpu-moves", "198.18.6.1")
    shard = shard_of(node.pk, 5)
    Node.objects.filter(pk=node.pk).update(ip="198.18.6.99")
    [group] = groups(get(client, "sys-exporter", f"?shard={shard}&of=5"))
    assert group["targets"] == ["198.18.6.99:29101"]


@pytest.mark.parametrize(
    ("query", "parameter", "words"),
    [
        ("?shard=2&of=2", "shard", "between 0 and 1 when of=2"),
        ("?shard=-1&of=2", "shard", "whole number"),
        ("?shard=0&of=0", "of", "at least 1"),
        ("?shard=x&of=2", "shard", "whole number"),
        ("?shard=0&of=two", "of", "whole number"),
        # What int() would have read: a sign, an underscore, another script's digit.
        ("?shard=%2B1&of=2", "shard", "whole number"),
        ("?shard=0&of=1_0", "of", "whole number"),
        ("?shard=%D9%A1&of=2", "shard", "whole number"),
        ("?shard=0", "of", "missing"),
        ("?of=3", "shard", "missing"),
    ],
)
def test_a_bad_shard_parameter_is_named(client, sd_token, query, parameter, words):
    response = get(client, "sys-exporter", query)
    assert response.status_code == 400
    body = response.json()
    assert body["parameter"] == parameter
    assert words in body["detail"]


def test_an_unknown_job_is_404(client, sd_token):
    response = get(client, "mango-sdk-agent")  # an HTTP API, never scraped
    assert response.status_code == 404
    assert "sys-exporter" in response.json()["detail"]


def test_no_parameters_means_the_whole_set():
    assert parse_shard({}) == (0, 1)
    assert parse_shard({"shard": " 1 ", "of": "2"}) == (1, 2)


def test_the_shard_config_reads_http_sd_with_the_token_and_only_shard_0_scrapes_the_master(
    tmp_path, sd_token
):
    import yaml
    from django.core.management import call_command

    for shard in (0, 1):
        out = tmp_path / f"shard-{shard}" / "prometheus.yml"
        call_command(
            "prometheus_config", "--out", str(out), "--master", "198.18.7.1:28080",
            "--shard", str(shard), "--of", "2",
        )  # fmt: skip
        config = yaml.safe_load(out.read_text())
        jobs = {job["job_name"]: job for job in config["scrape_configs"]}
        assert ("mac-master" in jobs) is (shard == 0)
        [sd] = jobs["sys-exporter"]["http_sd_configs"]
        assert sd["url"] == f"http://198.18.7.1:28080/api/v1/sd/sys-exporter?shard={shard}&of=2"
        token_file = Path(sd["authorization"]["credentials_file"])
        assert token_file.read_text() == TOKEN
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert "file_sd_configs" not in jobs["nic-exporter"]
        assert config["global"]["external_labels"] == {"mac_shard": f"{shard}/2"}
        # ...which Prometheus would put on its alerts too: the backstop's MacNodeOffline
        # must keep exactly the master's own labels (one alert, one notification).
        assert config["alerting"]["alert_relabel_configs"] == [
            {"action": "labeldrop", "regex": "mac_shard"}
        ]
        assert f"--shard {shard} --of 2" in out.read_text()  # the header says how to redo it


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--shard", "2", "--of", "2"], "--shard: `shard` must be between 0 and 1"),
        (["--shard", "0"], "--of: `of` is missing"),
        (["--of", "0", "--shard", "0"], "--of: `of`"),
    ],
)
def test_the_command_names_a_bad_shard_flag(tmp_path, sd_token, args, words):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=re.escape(words)):
        call_command("prometheus_config", "--out", str(tmp_path / "p.yml"), *args)


def test_the_command_asks_for_the_token_before_writing_a_shard_config(tmp_path, settings):
    from django.core.management import CommandError, call_command

    settings.SD_TOKEN = ""
    with pytest.raises(CommandError, match="--shard needs MAC_SD_TOKEN"):
        call_command("prometheus_config", "--out", str(tmp_path / "p.yml"), "--shard", "0",
                     "--of", "2")  # fmt: skip
    assert not (tmp_path / "p.yml").exists()


@pytest.mark.parametrize(("interval", "refresh"), [(10.0, "10s"), (2.5, "2500ms"), (30.0, "30s")])
def test_the_shard_config_reads_its_targets_as_often_as_the_sweep_runs(
    tmp_path, sd_token, settings, interval, refresh
):
    """docs/probing.md: http_sd is refreshed every sweep interval, whatever it is."""
    import shutil
    import subprocess

    import yaml
    from django.core.management import call_command

    settings.PROBE_INTERVAL = interval
    out = tmp_path / "prometheus.yml"
    call_command("prometheus_config", "--out", str(out), "--shard", "0", "--of", "2")

    jobs = yaml.safe_load(out.read_text())["scrape_configs"]
    sds = [sd for job in jobs for sd in job.get("http_sd_configs", ())]
    assert sds and {sd["refresh_interval"] for sd in sds} == {refresh}
    if shutil.which("promtool"):
        run = subprocess.run(
            ["promtool", "check", "config", "--syntax-only", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr
