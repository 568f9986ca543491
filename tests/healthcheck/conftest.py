"""Fixtures of the healthcheck tests: Redis, targets folder, master processes, Celery.

Every test run gets its own loopback block (127.<pid-derived>.x.y) so that
parallel runs of other engineers never collide with ours on port 29101.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from healthcheck.state import get_redis
from testkit.ports import free_port
from testkit.waiting import wait_for, wait_http

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


@pytest.fixture
def sweep_redis(settings) -> Iterator[redis.Redis]:
    """Our Redis db with the sweep's keys, Celery's queue, its unacknowledged messages and
    its results (the chords' bookkeeping) cleared before and after."""
    client = get_redis()

    def clear() -> None:
        for pattern in ("*:sweep:*", "celery-task-meta-*", "chord-unlock-*"):  # every master's
            for key in client.scan_iter(match=pattern):
                client.delete(key)
        client.delete("celery", "_kombu.binding.celery", "unacked", "unacked_index")

    clear()
    yield client
    clear()
    client.close()


@pytest.fixture
def sd_dir(tmp_path, settings) -> Path:
    path = tmp_path / "targets"
    settings.SD_DIR = path
    return path


@pytest.fixture
def fast_probes(settings):
    """Short timeouts so that dead nodes cost little test time."""
    settings.PROBE_TIMEOUT = 0.5
    settings.PROBE_INTERVAL = 1.0
    return settings


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a master process started by a test: the test database, our Redis."""
    from django.conf import settings
    from django.db import connection

    env = dict(os.environ)
    db = connection.settings_dict
    user = quote(db["USER"] or "", safe="")
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    env["DATABASE_URL"] = f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"
    env.pop("MAC_TEST_DB_NAME", None)
    # This process's cache prefix, so the sweep records they write are those the test reads
    # (healthcheck.state.PREFIX), whatever installation id their data folder has by now.
    env.setdefault("MAC_CACHE_PREFIX", settings.CACHES["default"]["KEY_PREFIX"])
    env.update(extra)
    return env


class Processes:
    """Child processes of one test, stopped (by their own pid) at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[subprocess.Popen] = []

    def start(self, name: str, args: list[str], env: dict[str, str] | None) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        child = subprocess.Popen(
            args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        child.log_path = self.log_dir / f"{name}.log"  # type: ignore[attr-defined]
        self.children.append(child)
        return child

    def stop(self, child: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
        if child.poll() is None:
            child.send_signal(sig)
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)

    def stop_all(self) -> None:
        for child in reversed(self.children):
            self.stop(child)

    def logs(self) -> str:
        return "\n".join(
            f"--- {Path(c.log_path).name}\n{Path(c.log_path).read_text(errors='replace')[-3000:]}"
            for c in self.children
        )


PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMETHEUS_MARKS = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(
        not shutil.which("prometheus"), reason="Debian's prometheus is not installed"
    ),
]


def start_prometheus(
    processes: Processes, work: Path, name: str = "prometheus", *flags: str
) -> tuple[subprocess.Popen, str]:
    """Prometheus on a free port with `work/prometheus.yml`: the process and its API URL."""
    port = free_port()
    child = processes.start(
        name,
        [
            PROMETHEUS,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            *flags,
        ],
        env=None,
    )
    api = f"http://127.0.0.1:{port}"
    wait_http(api + "/-/ready", 30, process=child, interval=0.2)
    return child, api


def prometheus_get(url: str) -> dict | None:
    """A Prometheus API answer as JSON ({"raw": text} if it is not JSON); None if none."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            body = response.read()
    except OSError:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return {"raw": body.decode(errors="replace")}


@pytest.fixture
def processes(tmp_path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    yield procs
    procs.stop_all()


CELERY = str(Path(sys.executable).with_name("celery"))


@pytest.fixture
def master_procs(transactional_db, processes, sweep_redis, tmp_path):
    """start(beats=1) -> starts a real Celery worker and `beats` beat processes.

    They run against the test database and our Redis db, by default with a 1 s
    probe interval and a 0.5 s probe timeout; all are stopped at the end of the
    test. start.start_worker() starts another worker with the same settings.
    """
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("worker and beat processes share the test database: needs PostgreSQL")
    sd = tmp_path / "targets"

    def start(
        beats: int = 1,
        worker: bool = True,
        interval: float = 1.0,
        timeout: float = 0.5,
        **extra_env: str,
    ):
        env = subprocess_env(
            **{
                "MAC_PROBE_INTERVAL": str(interval),
                "MAC_PROBE_TIMEOUT": str(timeout),
                "MAC_SD_DIR": str(sd),
                "MAC_LOG_LEVEL": "INFO",
                **extra_env,
            }
        )
        if worker:
            start_worker(env)
        for index in range(beats):
            schedule = tmp_path / f"beat-{index}"
            processes.start(
                f"beat-{index}",
                [CELERY, "-A", "macweb", "beat", "-l", "info", "-s", str(schedule),
                 "--pidfile", ""],
                env,
            )  # fmt: skip
        start.env = env  # type: ignore[attr-defined]
        return processes

    def start_worker(
        env: dict | None = None, name: str = "worker", pool: str = "solo", queues: str = ""
    ) -> subprocess.Popen:
        """pool "prefork" runs one child process; queues is celery's -Q (default: default)."""
        extra = ["-Q", queues] if queues else []
        if pool == "prefork":
            extra += ["--concurrency=1"]
        return processes.start(
            name,
            [CELERY, "-A", "macweb", "worker", f"--pool={pool}", "-l", "info", "-n", f"{name}@%h",
             "--without-heartbeat", "--without-gossip", "--without-mingle", *extra],
            env or start.env,  # type: ignore[attr-defined]
        )  # fmt: skip

    start.start_worker = start_worker  # type: ignore[attr-defined]
    start.sd_dir = sd  # type: ignore[attr-defined]
    return start


def wait_ready(child: subprocess.Popen, timeout: float = 30) -> None:
    """Wait for a simulated fleet child to print READY; fail with its log if it died."""

    def ready() -> bool:
        text = Path(child.log_path).read_text(errors="replace")
        if child.poll() is not None and "READY" not in text:
            raise AssertionError(f"{child.args} exited with {child.returncode}:\n{text}")
        return "READY" in text

    wait_for(ready, timeout=timeout, interval=0.05)


@pytest.fixture
def database():
    """A PostgreSQL cluster of the test's own, to stop, freeze or fill at will."""
    from tests.healthcheck.private_servers import PrivatePostgres

    pg = PrivatePostgres()
    pg.start()
    yield pg
    pg.remove()
