"""`mac start|status|stop master` with the process runtime: api-server behind its proxy,
worker, beat, Prometheus and Alertmanager.

The master runs on its own embedded SQLite database in a temporary data directory
(never the shared PostgreSQL), with free loopback ports and this run's Redis db.
"""

from __future__ import annotations

import json
import shutil
import stat
import time
import urllib.request

import psutil
import pytest

from testkit.ports import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus is missing"),
    pytest.mark.skipif(
        not shutil.which("prometheus-alertmanager"),
        reason="Debian's prometheus-alertmanager is missing",
    ),
]


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read()


def _tree(pid: int) -> list[psutil.Process]:
    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_start_status_stop_master(mac_env):
    api, prom, alerts = free_port(), free_port(), free_port()
    mac_env.env.pop("DATABASE_URL", None)
    mac_env.env.pop("SECRET_KEY", None)  # the key file of prepare_master, as on a real master
    mac_env.env.update(
        {
            "MAC_DATA_DIR": str(mac_env.root / "data"),
            "MAC_MASTER_PORT": str(api),
            "MAC_PROMETHEUS_PORT": str(prom),
            "MAC_ALERTMANAGER_PORT": str(alerts),
            "MAC_MASTER_BIND": "127.0.0.1",
            "MAC_API_WORKERS": "1",
            "MAC_WORKER_CONCURRENCY": "1",
            "MAC_ADMIN_PASSWORD": "admin-pass-for-tests",
        }
    )
    try:
        started = mac_env.run("start", "master", timeout=240)
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"Dashboard:   http://127.0.0.1:{api}/" in started.stdout
        # Prometheus and Alertmanager through the front door; Prometheus on the loopback too.
        assert f"Prometheus:  http://127.0.0.1:{api}/prometheus/targets" in started.stdout
        assert f"also http://127.0.0.1:{prom}/" in started.stdout
        assert f"Alerts:      http://127.0.0.1:{api}/alertmanager/" in started.stdout
        assert "Admin:       Created admin user 'admin'; password from MAC_ADMIN_PASSWORD." in (
            started.stdout
        )
        assert started.stdout.strip().endswith("Master started.")
        key_file = mac_env.root / "data" / "secret_key"  # made by prepare_master, first
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text()

        status, body = _get(f"http://127.0.0.1:{api}/health")
        assert status == 200 and json.loads(body)["status"] == "ok", body
        # The config came from manage.py prometheus_config: it scrapes the master itself.
        deadline = time.monotonic() + 30
        while True:
            _, body = _get(f"http://127.0.0.1:{prom}/api/v1/targets")
            targets = json.loads(body)["data"]["activeTargets"]
            if any(t["labels"]["job"] == "mac-master" for t in targets):
                break
            assert time.monotonic() < deadline, targets
            time.sleep(0.5)

        shown = mac_env.run("status", "master")
        assert shown.returncode == 0, shown.stdout
        rows = {line.split()[0]: line.split() for line in shown.stdout.splitlines()[2:]}
        internal = mac_env.env["MAC_API_INTERNAL_PORT"]
        assert rows["api-server"][1:4] == ["running", "ok", internal]
        assert rows["proxy"][1:4] == ["running", "ok", str(api)]
        assert rows["prometheus"][1:4] == ["running", "ok", str(prom)]
        assert rows["alertmanager"][1:4] == ["running", "ok", str(alerts)]
        assert rows["worker"][1:3] == ["running", "ok"]  # it answered a Celery ping
        assert rows["beat"][1] == "running"

        again = mac_env.run("start", "master", timeout=240)
        assert again.returncode == 0
        assert key_file.read_text() == key
        assert "Admin user 'admin'" in again.stdout or "Updated admin user" in again.stdout
    finally:
        pids = {
            path.stem: json.loads(path.read_text())["pid"]
            for path in (mac_env.state_dir / "master").glob("*.pid")
        }
        family = [proc for pid in pids.values() for proc in _tree(pid)]
        stopped = mac_env.run("stop", "master")
    assert set(pids) == {"api-server", "proxy", "worker", "beat", "prometheus", "alertmanager"}
    assert stopped.returncode == 0, stopped.stderr
    assert "Stopped the master (process runtime)." in stopped.stdout
    # Gunicorn's and Celery's own children go too.
    assert len(family) > 4
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not list((mac_env.state_dir / "master").glob("*.pid"))
