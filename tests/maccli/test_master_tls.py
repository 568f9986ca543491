"""`mac start master` (process runtime) and its TLS: the join line carries the HTTPS URL
and the pin of the CA made at the first start, Prometheus scrapes the master over that
HTTPS, a restart keeps the CA (pins stay valid), and a bad MAC_TLS_CERT stops the start
with a message, not a traceback."""

from __future__ import annotations

import http.client
import json
import shutil
import time
import urllib.request

import pytest

from contract.pinning import first_certificate, pinned_context, spki_sha256
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


def _master_target(prom: int, tls: int) -> dict:
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


def test_the_join_line_pins_the_ca_that_serves_https_and_survives_a_restart(mac_env):
    api, prom, alerts = free_port(), free_port(), free_port()
    tls = int(mac_env.env["MAC_TLS_PORT"])
    data = mac_env.root / "data"
    mac_env.env.pop("DATABASE_URL", None)
    mac_env.env.pop("SECRET_KEY", None)
    mac_env.env.update(
        {
            "MAC_DATA_DIR": str(data),
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
        ca_pem = (data / "tls" / "ca.pem").read_bytes()
        pin = spki_sha256(first_certificate(ca_pem))
        assert (
            f"Agents join: mac env set MASTER_URL=https://127.0.0.1:{tls} && "
            f"mac env set MAC_MASTER_CA_SHA256={pin} && mac start agent"
        ) in started.stdout
        assert "(unverified, plain HTTP: mac env set MASTER_IP=127.0.0.1" in started.stdout

        conn = http.client.HTTPSConnection(
            "127.0.0.1", tls, timeout=5, context=pinned_context(ca_pem)
        )
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        conn.close()
        target = _master_target(prom, tls)
        assert target["scrapeUrl"] == f"https://127.0.0.1:{tls}/metrics"
        assert target["health"] == "up", target["lastError"]

        server_pem = (data / "tls" / "server.pem").read_bytes()
        assert mac_env.run("stop", "master").returncode == 0
        again = mac_env.run("start", "master", timeout=240)
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"MAC_MASTER_CA_SHA256={pin} " in again.stdout
        assert (data / "tls" / "ca.pem").read_bytes() == ca_pem
        assert (data / "tls" / "server.pem").read_bytes() == server_pem
        assert mac_env.run("stop", "master").returncode == 0

        # The site's own certificate, given wrong: stopped before anything starts.
        bad = mac_env.run(
            "start", "master", timeout=240,
            extra={"MAC_TLS_CERT": str(data / "missing.pem"), "MAC_TLS_KEY": str(data / "k")},
        )  # fmt: skip
        assert bad.returncode == 1
        error = " ".join(bad.stderr.split())
        assert f"MAC_TLS_CERT={data / 'missing.pem'}: cannot read it" in error
        assert "Traceback" not in bad.stderr and "Traceback" not in bad.stdout
    finally:
        mac_env.run("stop", "master")
