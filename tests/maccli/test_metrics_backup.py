"""`mac backup metrics` / `mac restore metrics`: vmbackup and vmrestore on a real store.

The store is Debian's victoria-metrics, run on a free port over the folder that scale-
out mode gives it (`$MAC_DATA_DIR/scaleout/store`), with the keys MAC keeps for it, as
`mac start master` would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from maccli.master import scaleout
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.maccli.conftest import MacEnv

pytestmark = pytest.mark.skipif(
    not all(shutil.which(b) for b in ("victoria-metrics", "vmbackup", "vmrestore")),
    reason="Debian's victoria-metrics package (store, vmbackup, vmrestore) is needed",
)


class Store:
    def __init__(self, data: Path, port: int) -> None:
        self.data, self.url = data, f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        # scale-out mode's folder: the store's data and keys are both in it.
        self.keys = scaleout.store_keys(data.parent)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["victoria-metrics", *scaleout.ENVFLAG_ARGS, f"-storageDataPath={self.data}",
             f"-httpListenAddr={self.url.removeprefix('http://')}", "-search.latencyOffset=0s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **self.keys},
        )  # fmt: skip
        wait_for(lambda: self._get("/health") is not None, timeout=60, what="the store")

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(30)
            self.proc = None

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as answer:
                return answer.read()
        except OSError:
            return None

    def snapshots(self) -> list[str]:
        key = self.keys[scaleout.envflag_variable("snapshotAuthKey")]
        return json.loads(self._get(f"/snapshot/list?authKey={key}"))["snapshots"]

    def write(self, line: str) -> None:
        request = urllib.request.Request(
            f"{self.url}/api/v1/import/prometheus", data=line.encode(), method="POST"
        )
        urllib.request.urlopen(request, timeout=5).close()

    def value(self, metric: str) -> str | None:
        answer = self._get(f"/api/v1/query?{urllib.parse.urlencode({'query': metric})}")
        result = json.loads(answer)["data"]["result"] if answer else []
        return result[0]["value"][1] if result else None


@pytest.fixture
def store(mac_env: MacEnv, tmp_path):
    port = free_port()
    mac_env.env.update(
        {
            "MAC_DATA_DIR": str(tmp_path / "data"),
            "MAC_SCRAPE_SHARDS": "1",
            "MAC_METRICS_STORE_PORT": str(port),
        }
    )
    running = Store(tmp_path / "data" / "scaleout" / "store", port)
    running.start()
    yield running
    running.stop()


def test_it_backs_up_and_restores_the_store(mac_env, store, tmp_path):
    store.write(f"mac_backup_probe 42 {int(time.time() * 1000)}\n")
    wait_for(lambda: store.value("mac_backup_probe") == "42", what="the sample in the store")
    backup = tmp_path / "backups" / "metrics"

    made = mac_env.run("backup", "metrics", str(backup), timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "Backed up the metrics store" in made.stdout and "vmbackup" in made.stdout
    assert any(backup.rglob("*"))
    # With the snapshot key, which is never printed: the command reads it from its file.
    key_file = scaleout.store_key_file(store.data.parent, "snapshotAuthKey")
    assert f"authKey=$(cat {key_file})" in made.stdout
    assert all(key not in made.stdout + made.stderr for key in store.keys.values())
    assert store.snapshots() == []  # vmbackup deleted its snapshot, with the key too

    refused = mac_env.run("restore", "metrics", str(backup))
    assert refused.returncode != 0
    assert "must be stopped" in refused.stderr + refused.stdout
    assert "mac stop master" in refused.stderr + refused.stdout

    store.stop()
    shutil.rmtree(store.data)  # the store's folder lost
    restored = mac_env.run("restore", "metrics", str(backup), timeout=300)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "mac start master" in restored.stdout
    store.start()
    assert store.value("mac_backup_probe") == "42"


def test_the_store_refuses_its_maintenance_without_its_keys(store):
    """Checked at the store itself: whoever reaches its port still needs the key."""
    for path in (
        "/api/v1/admin/tsdb/delete_series?match[]=mac_backup_probe",
        "/snapshot/create",
        "/snapshot/delete_all",
        "/internal/force_merge",
        "/internal/force_flush",
        "/internal/resetRollupResultCache",
        "/flags",
        "/config",
        "/debug/pprof/",
    ):
        for wrong in ("", "&authKey=guess" if "?" in path else "?authKey=guess"):
            request = urllib.request.Request(store.url + path + wrong, method="POST", data=b"")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=5)
            assert refused.value.code in (400, 401, 403, 422), path
            assert b"authKey" in refused.value.read(), path
    assert store.snapshots() == []
    key = store.keys[scaleout.envflag_variable("deleteAuthKey")]
    done = store._get(f"/api/v1/admin/tsdb/delete_series?match[]=mac_no_such_series&authKey={key}")
    assert done is not None  # with its key it answers


def test_it_keeps_the_stores_keys_once_made_and_private(tmp_path):
    work = tmp_path / "scaleout"
    first = scaleout.store_keys(work)
    assert scaleout.store_keys(work) == first
    assert len(set(first.values())) == len(scaleout.STORE_KEY_FLAGS)
    for flag in scaleout.STORE_KEY_FLAGS:
        path = scaleout.store_key_file(work, flag)
        assert path.stat().st_mode & 0o777 == 0o600
        assert len(path.read_text()) >= 32


def test_it_says_backups_need_scale_out_mode(mac_env, tmp_path):
    mac_env.env.update({"MAC_DATA_DIR": str(tmp_path / "data"), "MAC_SCRAPE_SHARDS": "0"})
    answer = mac_env.run("backup", "metrics", str(tmp_path / "b"))
    assert answer.returncode != 0
    assert "MAC_SCRAPE_SHARDS" in answer.stderr + answer.stdout


def test_it_says_when_the_store_is_not_running(mac_env, tmp_path):
    mac_env.env.update(
        {
            "MAC_DATA_DIR": str(tmp_path / "data"),
            "MAC_SCRAPE_SHARDS": "1",
            "MAC_METRICS_STORE_PORT": str(free_port()),
        }
    )
    answer = mac_env.run("backup", "metrics", str(tmp_path / "b"))
    assert answer.returncode != 0
    assert "does not answer" in answer.stderr + answer.stdout
