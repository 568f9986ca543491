"""Private Redis and PostgreSQL servers that a test may stop and restart at will.

The shared services on 6379 and 5432 belong to every engineer's test runs; a test that
kills its broker or its database kills one of these, on a free port in its own
temporary directory, and never the shared ones.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import redis

from testkit.ports import free_port


class PrivateRedis:
    """redis-server on a free loopback port, without persistence (a restart loses all);
    with `password`, it wants it (requirepass) and `url` carries it."""

    def __init__(self, directory: Path, password: str = "") -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed")
        self.directory = directory
        self.port = free_port()
        self.password = password
        login = f":{password}@" if password else ""
        self.url = f"redis://{login}127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.directory / "redis.log", "ab")  # noqa: SIM115 - owned by the process
        auth = ["--requirepass", self.password] if self.password else []
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.directory), *auth],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        client = self.client()
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)


class PrivatePostgres:
    """A PostgreSQL cluster of its own (initdb + pg_ctl) on a free port, trust auth."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.bin = Path(found[-1]).parent
        # Not under pytest's tmp_path: as root, the server runs as `postgres`, which
        # cannot enter root's private temporary folders.
        self.root = Path(tempfile.mkdtemp(prefix="mac-test-pg-"))
        self.data = self.root / "pgdata"
        self.port = free_port()
        self.user = "postgres"
        if os.geteuid() == 0:
            self.root.chmod(0o755)
            shutil.chown(self.root, "postgres")
        self._run([self.bin / "initdb", "-D", self.data, "-U", self.user, "-A", "trust"])

    def _run(self, argv: list) -> None:
        # initdb and the server refuse to run as root: run them as the postgres user then.
        command = [str(part) for part in argv]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def remove(self) -> None:
        """Stop the server if it still runs, and delete its files."""
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def start(self) -> None:
        self._run(
            [self.bin / "pg_ctl", "-D", self.data, "-l", self.root / "pg.log", "-w",
             "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1",
             "start"]
        )  # fmt: skip

    def stop(self) -> None:
        self._run([self.bin / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"])

    def url(self, name: str = "postgres") -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{name}"


class Frozen:
    """SIGSTOP the postmaster and every backend; SIGCONT them on exit (always)."""

    def __init__(self, pg: PrivatePostgres) -> None:
        pid = int((pg.data / "postmaster.pid").read_text().split()[0])
        self.postmaster = psutil.Process(pid)
        self.stopped: list[psutil.Process] = []

    def __enter__(self) -> Frozen:
        for proc in [self.postmaster, *self.postmaster.children(recursive=True)]:
            proc.send_signal(signal.SIGSTOP)
            self.stopped.append(proc)
        self.since = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.stopped:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGCONT)
