"""A real serving stack (nginx in front of gunicorn + uvicorn) for the tests of the server.

It starts exactly as `mac start master` starts its `proxy` and `api-server` services
(`manage.py proxy_config` and nginx; gunicorn `-c python:macweb.gunicorn_conf` on a
loopback port of its own), on free loopback ports, with a private SQLite inventory
in its own data directory, so it needs nothing from pytest-django and runs the same
on the PostgreSQL and the SQLite passes. `port` is the proxy's: what clients reach.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.proxy import start_proxy
from testkit.waiting import WaitTimeout, wait_http

REPO = Path(__file__).resolve().parents[2]


@dataclass
class ApiServer:
    port: int
    process: subprocess.Popen
    log: Path
    data: Path
    env: dict[str, str]
    proxy: subprocess.Popen | None = None
    api_port: int = 0  # the API server's own port, behind the proxy

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connect(self, source: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket:
        """A raw TCP connection to the server from `source` (any 127.0.0.0/8 address)."""
        sock = socket.create_connection(
            ("127.0.0.1", self.port), timeout=timeout, source_address=(source, 0)
        )
        return sock

    def manage(self, *args: str) -> str:
        """Run `python -m django <args>` on this server's inventory; returns its stdout."""
        done = subprocess.run(
            [sys.executable, "-m", "django", *args],
            env=self.env, cwd=REPO, capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        return done.stdout

    def api_token(self, username: str = "fuzzer") -> str:
        """A DRF API token of a new user of this server (Authorization: Token <key>)."""
        code = (
            "from django.contrib.auth import get_user_model;"
            "from rest_framework.authtoken.models import Token;"
            f"u = get_user_model().objects.create_user({username!r});"
            "print(Token.objects.create(user=u).key)"
        )
        # Django's shell may announce its automatic imports first: the key is the last line.
        return self.manage("shell", "-c", code).strip().splitlines()[-1]

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proxy is not None:
            stop_process(self.proxy)
        stop_process(self.process)


def start_api_server(tmp: Path, env: dict[str, str] | None = None, workers: int = 1) -> ApiServer:
    """Migrate a fresh SQLite inventory in `tmp` and serve it; `env` adds MAC_* settings."""
    data = tmp / "data"
    data.mkdir(parents=True, exist_ok=True)
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith("MAC_") and k != "DATABASE_URL"
    }
    full_env.update(
        {
            "DJANGO_SETTINGS_MODULE": "macweb.settings",
            "PYTHONPATH": str(REPO),
            "MAC_DATA_DIR": str(data),
            # The tests' own (testkit.xdistworker sets it when nothing did).
            "MAC_REDIS_URL": os.environ["MAC_REDIS_URL"],
            # A prefix of its own: counters of this server never meet other tests'.
            "MAC_CACHE_PREFIX": f"live{os.getpid()}x{free_port()}",
            "MAC_PROBE_INTERVAL": "3600",
            "MAC_SECRET_KEY": "test-api-server-secret-key-not-for-production-0123456789",
            **(env or {}),
        }
    )
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"],
        env=full_env,
        check=True,
        cwd=REPO,
        timeout=180,
    )
    port, api_port = free_port(), free_port()
    log = tmp / "api-server.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "gunicorn", "macweb.asgi:application",
                "-c", "python:macweb.gunicorn_conf",
                "--bind", f"127.0.0.1:{api_port}", "--workers", str(workers),
                "--access-logfile", "-",
            ],
            stdout=handle, stderr=subprocess.STDOUT, env=full_env, cwd=REPO,
        )  # fmt: skip
    server = ApiServer(port, process, log, data, full_env, api_port=api_port)
    try:
        server.proxy = start_proxy(tmp, full_env, port, api_port)
    except (RuntimeError, subprocess.CalledProcessError):
        server.stop()
        raise
    try:
        # A long timeout: the first schema build can take seconds on a loaded machine,
        # and a second request racing it trips drf-spectacular's lazy extension loading
        # (not thread-safe: AttributeError, a 500 in the log).
        wait_http(
            f"{server.url}/api/v1/schema/", 90, process=process, request_timeout=30, interval=0.3
        )
    except WaitTimeout:
        server.stop()
        raise RuntimeError(f"the test API server did not start:\n{server.log_tail()}") from None
    return server


def timed_call(url: str, body: dict | None = None) -> tuple[int, dict, float]:
    """GET url, or POST body as JSON: (status, the JSON answer, seconds it took)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return status, json.loads(raw or b"{}"), time.monotonic() - started
