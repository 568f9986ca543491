"""A full disk under the targets folder: the sweep still pushes and records, /health names the disk.

The folder is a real 64 KiB tmpfs filled to the last byte, so the write fails with the
kernel's own ENOSPC (root only: mounting needs it).
"""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from healthcheck import tasks
from healthcheck.state import last_sweep, sweep_count
from inventory.choices import NodeStatus
from tests.inventory.test_live_pushes import Dashboard

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def full_disk(tmp_path, settings):
    mount = tmp_path / "targets"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        filler = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(filler, b"\0" * 512)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(filler)
        settings.SD_DIR = mount
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_it_pushes_records_and_blames_the_disk_when_targets_cannot_be_written(
    full_disk, sweep_redis, fast_probes, client, fleet, make_node
):
    runner = fleet(1)
    node = make_node(ip=runner.nodes[0].ip)
    dashboard = Dashboard()
    try:
        assert tasks.probe_fleet()["ran"] is True
        push = dashboard.receive(timeout=5)
    finally:
        dashboard.close()
    assert [change["id"] for change in push["changes"]] == [node.pk]
    assert push["changes"][0]["status"] == NodeStatus.ONLINE
    assert sweep_count(sweep_redis) == 1
    assert last_sweep(sweep_redis)["online"] == 1

    response = client.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["targets"]  # not the worker, not beat
    assert body["checks"]["sweeps"]["ok"] is True
    detail = body["checks"]["targets"]["detail"]
    assert f"cannot write {full_disk}: No space left on device" in detail

    (full_disk / "filler").unlink()  # the operator frees space: the next sweep writes
    assert tasks.probe_fleet(force=True)["ran"] is True
    assert (full_disk / "sys-exporter.json").exists()
    assert client.get("/health").json()["checks"]["targets"]["ok"] is True
