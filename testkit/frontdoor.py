"""The master's front door under load on its slow paths: for the bulkhead tests and bench.

A real serving stack (nginx, gunicorn + uvicorn, the API on a private SQLite
inventory) from any checkout, so that a benchmark can run the same scenario on another
commit; a burst of requests that wait on a frozen service (`burst`), and the requests
that must never wait timed meanwhile (`sample_front_door`). Services are frozen with
SIGSTOP (`Stopped`), as a hung process or a wedged VM would be.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.proxy import start_proxy
from testkit.waiting import WaitTimeout, wait_for, wait_http

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Answer:
    status: int
    body: dict
    seconds: float


@dataclass
class Stack:
    """nginx in front of the API server of `repo`; `url` is the proxy's."""

    repo: Path
    port: int
    api: subprocess.Popen
    proxy: subprocess.Popen | None
    env: dict[str, str]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def manage(self, code: str) -> str:
        """Run Python in `manage.py shell` of this stack; the last line it printed."""
        done = subprocess.run(
            [sys.executable, "-m", "django", "shell", "-c", code],
            env=self.env, cwd=self.repo, capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        return done.stdout.strip().splitlines()[-1]

    def session(self, username: str = "viewer", staff: bool = False) -> str:
        """A logged-in user's session cookie (sessionid=...) for the pages' JSON."""
        create = "create_superuser" if staff else "create_user"
        key = self.manage(
            "from django.contrib.auth import get_user_model, SESSION_KEY, BACKEND_SESSION_KEY,"
            " HASH_SESSION_KEY\n"
            "from django.contrib.sessions.backends.db import SessionStore\n"
            f"u = get_user_model().objects.{create}({username!r}, password='front-door-pass')\n"
            "s = SessionStore()\n"
            "s[SESSION_KEY] = str(u.pk)\n"
            "s[BACKEND_SESSION_KEY] = 'django.contrib.auth.backends.ModelBackend'\n"
            "s[HASH_SESSION_KEY] = u.get_session_auth_hash()\n"
            "s.create()\n"
            "print(s.session_key)"
        )
        return f"sessionid={key}"

    def staff_token(self, username: str = "operator") -> str:
        """A staff user's DRF token (Authorization: Token <key>)."""
        return self.manage(
            "from django.contrib.auth import get_user_model\n"
            "from rest_framework.authtoken.models import Token\n"
            f"u = get_user_model().objects.create_superuser({username!r}, password='pass-x')\n"
            "print(Token.objects.create(user=u).key)"
        )

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proxy is not None:
            stop_process(self.proxy)
        stop_process(self.api)


def start_stack(
    directory: Path, env: dict[str, str] | None = None, *, workers: int = 2, repo: Path = REPO
) -> Stack:
    """Migrate a fresh SQLite inventory in `directory` and serve it as `mac start master`."""
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith("MAC_") and k != "DATABASE_URL"
    }
    full_env.update(
        {
            "DJANGO_SETTINGS_MODULE": "macweb.settings",
            "PYTHONPATH": str(repo),
            "MAC_DATA_DIR": str(data),
            # The caller's (under pytest, testkit.xdistworker's: never a master's db 0).
            "MAC_REDIS_URL": os.environ["MAC_REDIS_URL"],
            "MAC_CACHE_PREFIX": f"door{os.getpid()}x{free_port()}",
            "MAC_PROBE_INTERVAL": "3600",
            "MAC_SECRET_KEY": "front-door-test-secret-key-not-for-production-0123456789",
            **(env or {}),
        }
    )
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"],
        env=full_env, check=True, cwd=repo, timeout=300,
    )  # fmt: skip
    port, api_port = free_port(), free_port()
    log = directory / "api-server.log"
    with log.open("wb") as handle:
        api = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "macweb.asgi:application",
             "-c", "python:macweb.gunicorn_conf",
             "--bind", f"127.0.0.1:{api_port}", "--workers", str(workers)],
            stdout=handle, stderr=subprocess.STDOUT, env=full_env, cwd=repo,
        )  # fmt: skip
    stack = Stack(repo, port, api, None, full_env, log)
    try:
        stack.proxy = start_proxy(directory, full_env, port, api_port, repo=repo)
        wait_http(f"{stack.url}/health", 120, process=api, request_timeout=30, interval=0.3)
    except (RuntimeError, subprocess.CalledProcessError, WaitTimeout):
        stack.stop()
        raise RuntimeError(f"the API server did not start:\n{stack.log_tail()}") from None
    return stack


def call(
    url: str,
    body: dict | None = None,
    *,
    method: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> Answer:
    """One request, timed; the JSON answer (or {"raw": text})."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except OSError as exc:
        return Answer(0, {"error": str(exc)}, time.monotonic() - started)
    seconds = time.monotonic() - started
    try:
        parsed = json.loads(raw or b"{}")
    except ValueError:
        parsed = {"raw": raw.decode(errors="replace")[:300]}
    return Answer(status, parsed if isinstance(parsed, dict) else {"list": parsed}, seconds)


@dataclass
class Burst:
    """`count` requests to `url` sent at once from threads of their own; answers when done."""

    url: str
    count: int
    headers: dict[str, str] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)

    def __enter__(self) -> Burst:
        self._pool = ThreadPoolExecutor(self.count)
        self._futures = [
            self._pool.submit(call, self.url, headers=self.headers) for _ in range(self.count)
        ]
        return self

    def __exit__(self, *exc) -> None:
        self.answers = [future.result() for future in self._futures]
        self._pool.shutdown()


def sample_front_door(
    url: str, seconds: float, *, interval: float = 0.2, prefix: str = "door"
) -> dict[str, list[Answer]]:
    """A GET /health and a POST /api/v1/register (a new host each time), each sent on
    its own every `interval` for `seconds`: what load balancers and agents meet."""
    answers: dict[str, list[Answer]] = {"health": [], "register": []}
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def one(name: str, *args) -> None:
        answer = call(*args)
        with lock:
            answers[name].append(answer)

    with ThreadPoolExecutor(32) as pool:
        n = 0
        while time.monotonic() < end:
            pool.submit(one, "health", f"{url}/health")
            pool.submit(
                one, "register", f"{url}/api/v1/register", {"hostname": f"{prefix}-{n:04d}"}
            )
            n += 1
            time.sleep(interval)
    return answers


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is stopped (state T in /proc/<pid>/task/*/stat); a
    process that is gone or dead (Z, X) counts as stopped: nothing of it answers."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


class Stopped:
    """SIGSTOP a process and its children (a hung service); SIGCONT on exit, always."""

    def __init__(self, *pids: int) -> None:
        self.pids = pids

    def __enter__(self) -> Stopped:
        for pid in self.pids:
            os.kill(pid, signal.SIGSTOP)
        # kill() only queues the signal: each thread stops when it next runs. The test's
        # requests go out once every thread is seen stopped, on a loaded host too.
        wait_for(
            lambda: all(_all_threads_stopped(pid) for pid in self.pids),
            10,
            0.01,
            what=f"every thread of {self.pids} stopped by SIGSTOP",
        )
        self.since = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
