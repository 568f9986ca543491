"""Fixtures of the `mac` tests: a private configuration per test, and `mac` as a subprocess.

Every path `mac` reads (per-user and per-node files, state dir, /proc for the mount
table) is redirected into tmp_path, so no test touches /etc/mango or ~/.mac.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Variables of the developer's shell that would change what `mac` does under test.
_SCRUB = ("MASTER_IP", "NODE_NAME", "NO_COLOR")


@dataclass
class MacEnv:
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def user_file(self) -> Path:
        return Path(self.env["MAC_USER_ENV_FILE"])

    @property
    def node_file(self) -> Path:
        return Path(self.env["MAC_NODE_ENV_FILE"])

    @property
    def state_dir(self) -> Path:
        return Path(self.env["MAC_STATE_DIR"])

    def mounts(self, *lines: str) -> None:
        """Write the mount table `mac` reads (MAC_PROC_ROOT/mounts)."""
        (self.root / "proc").mkdir(exist_ok=True)
        (self.root / "proc" / "mounts").write_text("\n".join(lines) + "\n")

    def shared_home(self, fstype: str = "nfs4") -> None:
        home = self.user_file.parent.parent
        self.mounts(
            "/dev/vda1 / ext4 rw,relatime 0 0",
            f"filer:/export/home {home} {fstype} rw,vers=4.2 0 0",
        )

    def run(self, *args: str, extra: dict[str, str] | None = None, timeout: float = 120):
        env = {**self.env, **(extra or {})}
        return subprocess.run(
            [sys.executable, "-m", "maccli.main", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )


@pytest.fixture
def mac_env(tmp_path: Path) -> MacEnv:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB and not k.startswith("MAC_")}
    for keep in ("MAC_REDIS_URL", "MAC_DATA_DIR", "MAC_TEST_DB_NAME"):
        if keep in os.environ:
            env[keep] = os.environ[keep]
    home = tmp_path / "home" / "op"
    (home / ".mac").mkdir(parents=True)
    env.update(
        {
            "HOME": str(home),
            "MAC_USER_ENV_FILE": str(home / ".mac" / "env"),
            "MAC_NODE_ENV_FILE": str(tmp_path / "etc" / "mango" / "mac" / "env"),
            "MAC_STATE_DIR": str(tmp_path / "state"),
            "MAC_PROC_ROOT": str(tmp_path / "proc"),
            "MAC_RUNTIME": "process",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        }
    )
    mac = MacEnv(tmp_path, env)
    mac.mounts("/dev/vda1 / ext4 rw,relatime 0 0")
    return mac


# --- a real master for the end-to-end tests ------------------------------------------------


@dataclass
class LiveMaster:
    port: int
    process: subprocess.Popen
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _test_database_url() -> str:
    """DATABASE_URL rewritten to the database pytest-django created (MAC_TEST_DB_NAME)."""
    from urllib.parse import urlsplit, urlunsplit

    from django.db import connections

    name = connections["default"].settings_dict["NAME"]
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
def live_master(django_db_setup, tmp_path_factory) -> LiveMaster:
    """gunicorn + uvicorn worker on a free loopback port, on the test database.

    Tests that use it take `transactional_db`, so what they and the server write is
    committed (each sees the other's rows) and flushed afterwards.
    """
    import urllib.request

    from testkit.ports import free_port

    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("the end-to-end master runs on PostgreSQL: set DATABASE_URL")
    port = free_port()
    data = tmp_path_factory.mktemp("master-data")
    log = data / "api-server.log"
    env = {
        **os.environ,
        "DATABASE_URL": _test_database_url(),
        "MAC_DATA_DIR": str(data),
        # No beat here: a long interval keeps /health's sweep check green.
        "MAC_PROBE_INTERVAL": "3600",
        "MAC_REGISTER_RATE": "100000/min",
        "DJANGO_SETTINGS_MODULE": "macweb.settings",
    }
    env.pop("MAC_JOIN_TOKEN", None)
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "gunicorn", "macweb.asgi:application",
                "-c", "python:macweb.gunicorn_conf", "--bind", f"127.0.0.1:{port}",
                "--workers", "1", "--access-logfile", "-",
            ],
            stdout=handle, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    master = LiveMaster(port, process, log)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{master.url}/health", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the test master did not become healthy:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)
    yield master
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def loopback_address(salt: int) -> str:
    """An address of 127.0.0.0/8 of this test run, so the contract ports are free on it."""
    pid = os.getpid()
    return f"127.77.{(pid // 250) % 250 + 1}.{(pid + salt) % 250 + 1}"
