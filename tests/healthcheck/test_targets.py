"""The file-SD targets: atomic, rewritten only on change, `[]` when empty, never deleted."""

from __future__ import annotations

import json
import os

from healthcheck.targets import (
    SCRAPED_SERVICES,
    ensure_target_files,
    render_targets,
    write_targets,
)


def row(node_id: int, ip: str, **extra) -> dict:
    base = {
        "id": node_id,
        "hostname": f"gpu-{node_id:02d}",
        "ip": ip,
        "gpu_vendor": "nvidia",
        "maintenance": False,
        "exporters": {"sys-exporter": 29101, "dcgm-exporter": 29150, "nic-exporter": 29500},
    }
    base.update(extra)
    return base


def test_one_group_per_node_and_job_with_its_labels(tmp_path):
    write_targets([row(2, "10.0.0.2", maintenance=True), row(1, "10.0.0.1")], tmp_path)

    dcgm = json.loads((tmp_path / "dcgm-exporter.json").read_text())
    assert dcgm == [
        {
            "targets": ["10.0.0.1:29150"],
            "labels": {
                "node": "1",
                "hostname": "gpu-01",
                "gpu_vendor": "nvidia",
                "maintenance": "false",
            },
        },
        {
            "targets": ["10.0.0.2:29150"],
            "labels": {
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
    changed = write_targets([row(1, "10.0.0.1"), row(2, "10.0.0.2", exporters={})], tmp_path)
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
