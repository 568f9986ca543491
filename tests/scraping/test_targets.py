"""The file-SD targets: who is listed, atomic, rewritten only on change, `[]` when empty,
never deleted."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from scraping.targets import (
    SCRAPED_SERVICES,
    ensure_target_files,
    node_targets,
    render_targets,
    shard_of,
    write_targets,
)

EXPORTERS = {"sys-exporter": 29101, "dcgm-exporter": 29150, "nic-exporter": 29500}


def row(node_id: int, ip: str, **extra) -> dict:
    base = {
        "id": node_id,
        "hostname": f"gpu-{node_id:02d}",
        "ip": ip,
        "gpu_vendor": "nvidia",
        "maintenance": False,
        "status": "online",
        "exporters": EXPORTERS,
        "exporter_health": {name: True for name in EXPORTERS},
    }
    base.update(extra)
    return base


def forwarding_off(node_id: int, ip: str) -> dict:
    """Offline under ip_forward=0: the bridge exporters time out, nic-exporter answers."""
    health = {"sys-exporter": False, "dcgm-exporter": False, "nic-exporter": True}
    return row(node_id, ip, status="offline", exporter_health=health)


def listed(content: bytes) -> list[str]:
    return [address for group in json.loads(content) for address in group["targets"]]


def test_an_online_node_is_listed_in_every_job_that_answered():
    assert node_targets(row(1, "10.0.0.1")) == ["sys-exporter", "dcgm-exporter", "nic-exporter"]


def test_an_offline_node_keeps_only_the_exporters_that_answered():
    files = render_targets([forwarding_off(1, "10.0.0.1"), row(2, "10.0.0.2")])

    assert listed(files["nic-exporter"]) == ["10.0.0.1:29500", "10.0.0.2:29500"]
    assert listed(files["sys-exporter"]) == ["10.0.0.2:29101"]
    assert listed(files["dcgm-exporter"]) == ["10.0.0.2:29150"]
    nic = json.loads(files["nic-exporter"])[0]
    assert nic["labels"] == {
        "cluster_name": "mac",
        "node": "1",
        "hostname": "gpu-01",
        "gpu_vendor": "nvidia",
        "maintenance": "false",
    }


def test_sys_exporter_follows_the_node_status_not_its_own_probe():
    # Online with a stale health map still scrapes the heartbeat; Offline never does.
    assert "sys-exporter" in node_targets(row(1, "10.0.0.1", exporter_health={}))
    offline = row(1, "10.0.0.1", status="offline")
    assert "sys-exporter" not in node_targets(offline)
    assert node_targets(offline) == ["dcgm-exporter", "nic-exporter"]


def test_an_exporter_whose_probe_failed_leaves_its_file_while_the_node_is_online():
    health = {"sys-exporter": True, "dcgm-exporter": False, "nic-exporter": True}
    assert node_targets(row(1, "10.0.0.1", exporter_health=health)) == [
        "sys-exporter",
        "nic-exporter",
    ]


def test_an_exporter_the_node_did_not_report_is_never_listed():
    node = row(1, "10.0.0.1", exporters={"sys-exporter": 29101})
    node["exporter_health"] = {"sys-exporter": True, "nic-exporter": True}
    assert node_targets(node) == ["sys-exporter"]


def test_a_node_not_probed_yet_is_not_listed():
    assert node_targets(row(1, "10.0.0.1", status="unknown", exporter_health={})) == []


def test_going_offline_with_forwarding_off_rewrites_only_the_jobs_it_left(tmp_path):
    write_targets([row(1, "10.0.0.1")], tmp_path)
    nic_inode = os.stat(tmp_path / "nic-exporter.json").st_ino

    changed = write_targets([forwarding_off(1, "10.0.0.1")], tmp_path)

    assert sorted(changed) == ["dcgm-exporter", "sys-exporter"]
    assert os.stat(tmp_path / "nic-exporter.json").st_ino == nic_inode
    assert listed((tmp_path / "nic-exporter.json").read_bytes()) == ["10.0.0.1:29500"]
    assert json.loads((tmp_path / "sys-exporter.json").read_text()) == []


def test_one_group_per_node_and_job_with_its_labels(tmp_path):
    write_targets([row(2, "10.0.0.2", maintenance=True), row(1, "10.0.0.1")], tmp_path)

    dcgm = json.loads((tmp_path / "dcgm-exporter.json").read_text())
    assert dcgm == [
        {
            "targets": ["10.0.0.1:29150"],
            "labels": {
                "cluster_name": "mac",
                "node": "1",
                "hostname": "gpu-01",
                "gpu_vendor": "nvidia",
                "maintenance": "false",
            },
        },
        {
            "targets": ["10.0.0.2:29150"],
            "labels": {
                "cluster_name": "mac",
                "node": "2",
                "hostname": "gpu-02",
                "gpu_vendor": "nvidia",
                "maintenance": "true",
            },
        },
    ]
    assert json.loads((tmp_path / "rocm-exporter.json").read_text()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{name}.json" for name in SCRAPED_SERVICES
    )


def test_ipv6_targets_are_bracketed():
    content = render_targets([row(1, "fd00::7")])["sys-exporter"]
    assert json.loads(content)[0]["targets"] == ["[fd00::7]:29101"]


def test_unchanged_content_is_not_rewritten(tmp_path):
    nodes = [row(1, "10.0.0.1")]
    assert set(write_targets(nodes, tmp_path)) == set(SCRAPED_SERVICES)
    before = {p.name: os.stat(p).st_ino for p in tmp_path.iterdir()}

    assert write_targets(nodes, tmp_path) == []
    assert {p.name: os.stat(p).st_ino for p in tmp_path.iterdir()} == before


def test_only_the_jobs_that_changed_are_rewritten(tmp_path):
    write_targets([row(1, "10.0.0.1")], tmp_path)
    changed = write_targets(
        [row(1, "10.0.0.1"), row(2, "10.0.0.2", exporters={}, exporter_health={})], tmp_path
    )
    assert changed == ["sys-exporter"]  # node 2 reported nothing else


def test_no_targets_means_empty_lists_never_deleted_files(tmp_path):
    write_targets([row(1, "10.0.0.1")], tmp_path)
    write_targets([], tmp_path)
    for name in SCRAPED_SERVICES:
        assert (tmp_path / f"{name}.json").read_text() == "[]\n"


def test_ensure_creates_missing_files_and_keeps_existing_ones(tmp_path):
    write_targets([row(1, "10.0.0.1")], tmp_path)
    (tmp_path / "bmc-agent.json").unlink()
    assert ensure_target_files(tmp_path) == ["bmc-agent"]
    assert json.loads((tmp_path / "sys-exporter.json").read_text()) != []


def test_files_are_readable_by_another_user(tmp_path):
    write_targets([row(1, "10.0.0.1")], tmp_path)
    assert (os.stat(tmp_path / "sys-exporter.json").st_mode & 0o777) == 0o644


def test_the_cluster_name_labels_every_group(tmp_path):
    write_targets([row(1, "10.0.0.1")], tmp_path, cluster_name="train-a")
    for service in ("sys-exporter", "nic-exporter"):
        groups = json.loads((tmp_path / f"{service}.json").read_text())
        assert {group["labels"]["cluster_name"] for group in groups} == {"train-a"}


def test_the_docs_show_a_targets_file_as_the_sweep_writes_it():
    """docs/probing.md's example group is what render_targets gives for that node."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "probing.md"
    section = docs.read_text().split("## The targets files", 1)[1]
    example = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    [group] = example
    labels = group["labels"]
    node = row(
        int(labels["node"]), group["targets"][0].rsplit(":", 1)[0], hostname=labels["hostname"]
    )
    written = json.loads(render_targets([node])["dcgm-exporter"])
    assert written == example


def test_scale_out_shares_split_the_whole_files_by_node(tmp_path):
    nodes = [row(n, f"10.0.0.{n}") for n in range(1, 21)]
    write_targets(nodes, tmp_path, shards=3)
    whole = listed((tmp_path / "sys-exporter.json").read_bytes())
    shares = [listed((tmp_path / f"shard-{k}-of-3" / "sys-exporter.json").read_bytes())
              for k in range(3)]  # fmt: skip
    # each node in one share, and only one
    assert sorted(a for share in shares for a in share) == sorted(whole) and len(whole) == 20
    for k, addresses in enumerate(shares):
        assert addresses, "20 nodes leave no shard of 3 empty"
        assert {shard_of(int(a.split(":")[0].rsplit(".", 1)[1]), 3) for a in addresses} == {k}
    # The labels are the whole file's, so a series is the same whoever scraped it.
    share = json.loads((tmp_path / "shard-0-of-3" / "nic-exporter.json").read_text())
    assert share and all(group in json.loads(render_targets(nodes)["nic-exporter"])
                         for group in share)  # fmt: skip


def test_a_change_rewrites_only_its_nodes_share(tmp_path):
    nodes = [row(n, f"10.0.0.{n}") for n in range(1, 21)]
    write_targets(nodes, tmp_path, shards=3)
    nodes[4] = forwarding_off(5, "10.0.0.5")  # node 5 goes Offline

    changed = write_targets(nodes, tmp_path, shards=3)

    k = shard_of(5, 3)
    assert changed == [
        "sys-exporter", "dcgm-exporter", f"shard-{k}-of-3/sys-exporter",
        f"shard-{k}-of-3/dcgm-exporter",
    ]  # fmt: skip


def test_ensure_makes_each_shares_files_and_removes_another_counts(tmp_path):
    write_targets([row(1, "10.0.0.1")], tmp_path, shards=3)
    created = ensure_target_files(tmp_path, 2)
    assert "shard-1-of-2/sys-exporter" in created and "sys-exporter" not in created
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "shard-0-of-2", "shard-1-of-2",
    ]  # fmt: skip
    assert (tmp_path / "shard-0-of-2" / "bmc-agent.json").read_text() == "[]\n"
    # Back to one Prometheus: no share is left to read.
    ensure_target_files(tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]
    assert json.loads((tmp_path / "sys-exporter.json").read_text()) != []
