"""`mac start|status|stop master` with the process runtime: api-server behind its proxy,
worker, beat, Prometheus and Alertmanager, and its TLS: the join line carries the HTTPS
URL and the pin of the CA made at the first start, Prometheus scrapes the master over
that HTTPS, a restart keeps the CA (pins stay valid), and a bad MAC_TLS_CERT stops the
start with a message, not a traceback.

One master serves the module (a master's start is most of these tests' time; issue 34):
the tests run in the order of the file, and the last one stops it. The master runs on
its own embedded SQLite database in a temporary data directory (never the shared
PostgreSQL), with free loopback ports and this run's Redis db.
"""

from __future__ import annotations

import http.client
import json
import shutil
import stat
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from contract.pinning import first_certificate, pinned_context, spki_sha256
from testkit.ports import free_port
from tests.maccli.conftest import MacEnv, make_mac_env

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


def _configure(mac_env: MacEnv) -> MacEnv:
    mac_env.env.pop("DATABASE_URL", None)
    mac_env.env.pop("SECRET_KEY", None)  # the key file of prepare_master, as on a real master
    mac_env.env.update(
        {
            "MAC_DATA_DIR": str(mac_env.root / "data"),
            "MAC_MASTER_PORT": str(free_port()),
            "MAC_PROMETHEUS_PORT": str(free_port()),
            "MAC_ALERTMANAGER_PORT": str(free_port()),
            "MAC_MASTER_BIND": "127.0.0.1",
            "MAC_API_WORKERS": "1",
            "MAC_WORKER_CONCURRENCY": "1",
            "MAC_ADMIN_PASSWORD": "admin-pass-for-tests",
        }
    )
    return mac_env


@dataclass
class Master:
    mac_env: MacEnv
    started: subprocess.CompletedProcess  # the output of its first start

    @property
    def data(self) -> Path:
        return self.mac_env.root / "data"

    def port(self, name: str) -> int:
        return int(self.mac_env.env[name])


@pytest.fixture(scope="module")
def master(tmp_path_factory) -> Master:
    mac_env = _configure(make_mac_env(tmp_path_factory.mktemp("master")))
    try:
        started = mac_env.run("start", "master", timeout=240)
        assert started.returncode == 0, started.stdout + started.stderr
        yield Master(mac_env, started)
    finally:
        mac_env.run("stop", "master")


def _master_target(prom: int) -> dict:
    """The mac-master target once Prometheus scraped it (health no longer 'unknown')."""
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{prom}/api/v1/targets", timeout=5) as r:
            targets = json.loads(r.read())["data"]["activeTargets"]
        found = [t for t in targets if t["labels"]["job"] == "mac-master"]
        if found and found[0]["health"] != "unknown":
            return found[0]
        assert time.monotonic() < deadline, targets
        time.sleep(0.5)


def test_start_says_where_everything_is_and_status_shows_every_service(master):
    mac_env, started = master.mac_env, master.started
    api, prom = master.port("MAC_MASTER_PORT"), master.port("MAC_PROMETHEUS_PORT")
    alerts = master.port("MAC_ALERTMANAGER_PORT")
    # People's pages over HTTPS; the guide's health check over plain HTTP.
    tls = mac_env.env["MAC_TLS_PORT"]
    assert f"Dashboard:   https://127.0.0.1:{tls}/" in started.stdout
    assert f"Health:      curl http://127.0.0.1:{api}/health" in started.stdout
    # Prometheus and Alertmanager through the front door; Prometheus on the loopback too.
    assert f"Prometheus:  https://127.0.0.1:{tls}/prometheus/targets" in started.stdout
    assert f"also curl http://127.0.0.1:{prom}/api/v1/targets" in started.stdout
    assert f"Alerts:      https://127.0.0.1:{tls}/alerts/" in started.stdout
    assert f"amtool and Grafana: https://127.0.0.1:{tls}/alertmanager/" in started.stdout
    assert "Admin:       Created admin user 'admin'; password from MAC_ADMIN_PASSWORD." in (
        started.stdout
    )
    assert started.stdout.strip().endswith("Master started.")
    key_file = master.data / "secret_key"  # made by prepare_master, first
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


def test_the_join_line_pins_the_ca_that_serves_https_and_prometheus_scrapes_over_it(master):
    tls = master.port("MAC_TLS_PORT")
    ca_pem = (master.data / "tls" / "ca.pem").read_bytes()
    pin = spki_sha256(first_certificate(ca_pem))
    assert (
        f"Agents join: mac env set MASTER_URL=https://127.0.0.1:{tls} && "
        f"mac env set MAC_MASTER_CA_SHA256={pin} && mac start agent"
    ) in master.started.stdout
    assert "(unverified, plain HTTP: mac env set MASTER_IP=127.0.0.1" in master.started.stdout

    conn = http.client.HTTPSConnection("127.0.0.1", tls, timeout=5, context=pinned_context(ca_pem))
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
    conn.close()
    target = _master_target(master.port("MAC_PROMETHEUS_PORT"))
    assert target["scrapeUrl"] == f"https://127.0.0.1:{tls}/metrics"
    assert target["health"] == "up", target["lastError"]


def test_a_restart_keeps_the_ca_and_the_pin(master):
    mac_env = master.mac_env
    ca_pem = (master.data / "tls" / "ca.pem").read_bytes()
    pin = spki_sha256(first_certificate(ca_pem))
    server_pem = (master.data / "tls" / "server.pem").read_bytes()
    assert mac_env.run("stop", "master").returncode == 0
    again = mac_env.run("start", "master", timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"MAC_MASTER_CA_SHA256={pin} " in again.stdout
    assert (master.data / "tls" / "ca.pem").read_bytes() == ca_pem
    assert (master.data / "tls" / "server.pem").read_bytes() == server_pem


def test_stop_ends_every_process_of_the_master(master):
    """The last test of the module: the master is gone after it."""
    mac_env = master.mac_env
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


def test_a_bad_tls_cert_stops_the_start_before_anything_starts(mac_env):
    """The site's own certificate, given wrong: a master of its own, that never starts."""
    _configure(mac_env)
    data = mac_env.root / "data"
    bad = mac_env.run(
        "start", "master", timeout=240,
        extra={"MAC_TLS_CERT": str(data / "missing.pem"), "MAC_TLS_KEY": str(data / "k")},
    )  # fmt: skip
    try:
        assert bad.returncode == 1
        error = " ".join(bad.stderr.split())
        assert f"MAC_TLS_CERT={data / 'missing.pem'}: cannot read it" in error
        assert "Traceback" not in bad.stderr and "Traceback" not in bad.stdout
        assert not list((mac_env.state_dir / "master").glob("*.pid"))
    finally:
        mac_env.run("stop", "master")
