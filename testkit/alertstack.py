"""A whole MAC master started by `mac start master` (process runtime) for alert tests.

Everything real: gunicorn, Celery worker and beat, Debian's Prometheus and
Alertmanager under supervisord, an embedded SQLite database in a temporary folder,
and short intervals from MAC's own settings (MAC_PROBE_INTERVAL, MAC_SCRAPE_INTERVAL,
MAC_ALERT_FOR, MAC_ALERT_GROUP_WAIT...). Used by tests/alerting/test_end_to_end.py and
bench/alert_latency.py, with a simulated fleet, a webhook receiver and an SMTP sink.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from testkit.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
ADMIN_PASSWORD = "admin-pass-for-alert-tests"
# Variables of the calling shell that would change what `mac` does.
_SCRUB = ("MASTER_IP", "NODE_NAME", "NO_COLOR", "DATABASE_URL", "SECRET_KEY")


@dataclass
class AlertStack:
    root: Path
    settings: dict[str, str] = field(default_factory=dict)
    api_port: int = field(default_factory=free_port)
    prom_port: int = field(default_factory=free_port)
    am_port: int = field(default_factory=free_port)
    internal_port: int = field(default_factory=free_port)
    tls_port: int = field(default_factory=free_port)
    env: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        home = self.root / "home"
        (home / ".mac").mkdir(parents=True, exist_ok=True)
        (self.root / "proc").mkdir(exist_ok=True)
        (self.root / "proc" / "mounts").write_text("/dev/vda1 / ext4 rw,relatime 0 0\n")
        keep = ("MAC_REDIS_URL",)
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in _SCRUB and (not k.startswith("MAC_") or k in keep)
        }
        env.update(
            {
                "HOME": str(home),
                "MAC_USER_ENV_FILE": str(home / ".mac" / "env"),
                "MAC_NODE_ENV_FILE": str(self.root / "etc" / "env"),
                "MAC_STATE_DIR": str(self.root / "state"),
                "MAC_PROC_ROOT": str(self.root / "proc"),
                "MAC_RUNTIME": "process",
                "PYTHONPATH": str(ROOT),
                "MAC_DATA_DIR": str(self.root / "data"),
                "MAC_MASTER_PORT": str(self.api_port),
                "MAC_PROMETHEUS_PORT": str(self.prom_port),
                "MAC_ALERTMANAGER_PORT": str(self.am_port),
                "MAC_API_INTERNAL_PORT": str(self.internal_port),
                # HTTPS of the front door: a free port too, never 28443 (parallel runs).
                "MAC_TLS_PORT": str(self.tls_port),
                "MAC_MASTER_BIND": "127.0.0.1",
                "MAC_API_WORKERS": "1",
                "MAC_WORKER_CONCURRENCY": "2",
                "MAC_ADMIN_PASSWORD": ADMIN_PASSWORD,
                "MAC_PUBLIC_URL": f"http://127.0.0.1:{self.api_port}",
                # The tests' webhook receivers listen on the loopback (alerting.destinations).
                "MAC_CHANNEL_ALLOWED_NETWORKS": "127.0.0.0/8",
                **self.settings,
            }
        )
        self.env = env

    # Addresses ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def am_url(self) -> str:
        return f"http://127.0.0.1:{self.am_port}"

    @property
    def prom_url(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    # The mac command --------------------------------------------------------------------------
    def mac(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "maccli.main", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )

    def start(self) -> subprocess.CompletedProcess:
        started = self.mac("start", "master")
        if started.returncode != 0:
            # What did start would live on and take the next master's tasks from Redis.
            self.stop()
            raise RuntimeError(f"mac start master failed:\n{started.stdout}\n{started.stderr}")
        return started

    def stop(self) -> subprocess.CompletedProcess:
        return self.mac("stop", "master", timeout=120)

    def service_pid(self, name: str) -> int:
        """The pid of a master service (its pid file under the state folder)."""
        path = self.root / "state" / "master" / f"{name}.pid"
        return json.loads(path.read_text())["pid"]

    def kill_service(self, name: str) -> int:
        pid = self.service_pid(name)
        os.kill(pid, signal.SIGKILL)
        return pid

    # Reading the master and its Alertmanager --------------------------------------------------
    def get_json(self, url: str, timeout: float = 5):
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.load(response)

    @property
    def metrics_token(self) -> str:
        """The token the master made at its first start (prepare_master)."""
        return (self.root / "data" / "metrics_token").read_text().strip()

    def node_up(self) -> dict[str, float]:
        """{hostname: value of mac_node_up} from the master's /metrics (with its token)."""
        request = urllib.request.Request(
            f"{self.url}/metrics", headers={"Authorization": f"Bearer {self.metrics_token}"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read().decode()
        found = {}
        for line in text.splitlines():
            if line.startswith("mac_node_up{"):
                host = re.search(r'hostname="([^"]+)"', line).group(1)
                found[host] = float(line.rsplit(" ", 1)[1])
        return found

    def mac_silences(self) -> list[dict]:
        silences = self.get_json(f"{self.am_url}/api/v2/silences")
        return [s for s in silences if s["createdBy"] == "mac" and s["status"]["state"] == "active"]

    def admin(self) -> AdminSession:
        return AdminSession(self.url, "admin", ADMIN_PASSWORD)

    def api_token(self, username: str) -> str:
        """The API token of `username`, a plain user (no staff flag, no permission),
        made on first use in this master's database."""
        code = (
            "from django.contrib.auth.models import User\n"
            "from rest_framework.authtoken.models import Token\n"
            f"user, _ = User.objects.get_or_create(username={username!r})\n"
            "print(Token.objects.get_or_create(user=user)[0].key)"
        )
        done = subprocess.run(
            [sys.executable, "-m", "django", "shell", "-c", code],
            env={**self.env, "DJANGO_SETTINGS_MODULE": "macweb.settings"},
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        return done.stdout.strip().splitlines()[-1]


class AdminSession:
    """A logged-in admin over plain HTTP: forms with their CSRF token, JSON with the header."""

    def __init__(self, url: str, username: str, password: str) -> None:
        self.url = url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        page = self.get("/admin/login/?next=/admin/")
        self.post_form(
            "/admin/login/?next=/admin/",
            {"username": username, "password": password, "next": "/admin/"},
            page,
        )

    def _csrf_cookie(self) -> str:
        return next((c.value for c in self.jar if c.name == "csrftoken"), "")

    def get(self, path: str) -> str:
        with self.opener.open(self.url + path, timeout=10) as response:
            return response.read().decode()

    def get_json(self, path: str):
        return json.loads(self.get(path))

    def get_json_answer(self, path: str) -> tuple[int, object]:
        """(status, body) of a JSON answer, an error status included: the dashboard's
        alerts.json says why alerts are unavailable in a 503's body."""
        try:
            with self.opener.open(self.url + path, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, json.loads(exc.read())

    def post_form(self, path: str, fields: dict, page: str) -> str:
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        body = urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": token}, doseq=True)
        request = urllib.request.Request(self.url + path, data=body.encode(), method="POST")
        request.add_header("Referer", self.url + path)
        with self.opener.open(request, timeout=30) as response:
            return response.read().decode()

    def send_json(self, method: str, path: str, payload: dict):
        request = urllib.request.Request(
            self.url + path, data=json.dumps(payload).encode(), method=method
        )
        request.add_header("Content-Type", "application/json")
        request.add_header("X-CSRFToken", self._csrf_cookie())
        request.add_header("Referer", self.url + path)
        with self.opener.open(request, timeout=30) as response:
            return json.load(response)
