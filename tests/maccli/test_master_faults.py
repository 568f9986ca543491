"""A master service killed a moment ago: `mac status` and `mac start` tell the truth (issue 19).

D3: for the seconds after a service dies, its launcher is still clearing what it left
behind, so supervisord still calls the program RUNNING; `mac status master` showed it
`running` (no pid, no health) and exited 0. D2: `mac start master` right after the
gunicorn master was killed with SIGKILL said "Master started." and exited 0 while the
API refused connections.

One real master (process runtime, SQLite, free loopback ports) serves the module. To
make "a moment ago" last long enough to look at, one child of the killed service is
stopped first (SIGSTOP, as a worker stuck in a system call would be): the launcher
gives such leftovers a few seconds before it kills them, and the service is gone
meanwhile.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from testkit.ports import free_port
from tests.maccli.conftest import MacEnv, make_mac_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus is missing"),
    pytest.mark.skipif(not shutil.which("nginx"), reason="Debian's nginx is missing"),
]


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _rows(stdout: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in stdout.splitlines()[2:] if line.split()}


@pytest.fixture(scope="module")
def master(tmp_path_factory) -> MacEnv:
    env = make_mac_env(tmp_path_factory.mktemp("faults"))
    env.env.pop("DATABASE_URL", None)
    env.env.update(
        {
            "MAC_DATA_DIR": str(env.root / "data"),
            "MAC_MASTER_PORT": str(free_port()),
            "MAC_MASTER_BIND": "127.0.0.1",
            "MAC_API_WORKERS": "2",
            "MAC_WORKER_CONCURRENCY": "2",
            "MAC_ADMIN_PASSWORD": "admin-pass-for-tests",
        }
    )
    started = env.run("start", "master", timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    yield env
    env.run("stop", "master", timeout=120)


def _service_pid(master: MacEnv, name: str) -> int:
    path = master.state_dir / "master" / f"{name}.pid"
    return json.loads(Path(path).read_text())["pid"]


def _kill_leaving_a_stuck_child(pid: int) -> None:
    """SIGKILL the service after stopping one of its children (held for a few seconds)."""
    children = psutil.Process(pid).children()
    assert children, f"pid {pid} has no children to leave behind"
    os.kill(children[0].pid, signal.SIGSTOP)
    os.kill(pid, signal.SIGKILL)


def _wait_healthy(master: MacEnv, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        shown = master.run("status", "master")
        if shown.returncode == 0:
            return
        assert time.monotonic() < deadline, shown.stdout
        time.sleep(1)


def test_status_right_after_a_service_died_says_it_is_not_running(master):
    _wait_healthy(master)
    for name in ("api-server", "worker"):
        _kill_leaving_a_stuck_child(_service_pid(master, name))

    shown = master.run("status", "master")

    rows = _rows(shown.stdout)
    assert shown.returncode == 1, shown.stdout
    for name in ("api-server", "worker"):
        state, health = rows[name][1], rows[name][2]
        assert not (state == "running" and health == "ok"), shown.stdout
        if state == "running":
            assert rows[name][5] != "-", shown.stdout  # never "running" without a pid
    assert rows["proxy"][1] == "running"
    _wait_healthy(master)  # and supervision brings both back


def test_start_right_after_the_gunicorn_master_was_killed_waits_until_the_api_answers(master):
    _wait_healthy(master)
    _kill_leaving_a_stuck_child(_service_pid(master, "api-server"))

    started = master.run("start", "master", timeout=300)

    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.strip().endswith("Master started.")
    # What it reported as it returned: each service back, with a pid, answering.
    rows = _rows(started.stdout)
    for name in ("api-server", "proxy", "worker"):
        assert rows[name][1:3] == ["running", "ok"], started.stdout
        assert rows[name][5] != "-", started.stdout
    public = f"http://127.0.0.1:{master.env['MAC_MASTER_PORT']}/health"
    direct = f"http://127.0.0.1:{master.env['MAC_API_INTERNAL_PORT']}/health"
    assert _get(public) == 200  # through the proxy, at once
    assert _get(direct) == 200
    shown = master.run("status", "master")
    assert shown.returncode == 0, shown.stdout
