"""The process runtime supervises: what crashes comes back, with backoff, and logs rotate.

Real services under a real supervisord: an exporter and the API server (gunicorn +
uvicorn) killed with SIGKILL come back by themselves; the gunicorn workers orphaned
by their master's death are removed rather than left holding the port; a port held by
a foreign process is named instead of reported "running ok".
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime

import psutil
import pytest

from maccli.output import CliError
from maccli.runtimes.base import ServiceSpec
from maccli.runtimes.process import ProcessRuntime
from testkit.ports import free_port
from testkit.processes import exited
from testkit.waiting import wait_for

pytestmark = pytest.mark.slow

BACKOFF = 15.0  # the promise: a crashed service answers again within this many seconds


def _healthy_again(runtime, role, spec, old_pid):
    def check():
        [state] = runtime.status(role, [spec])
        return state if state.running and state.pid != old_pid and state.health == "ok" else None

    return check


@pytest.fixture
def runtime(tmp_path):
    runtime = ProcessRuntime(tmp_path / "state", grace=5, poll=0.1)
    yield runtime
    for role in ("agent", "master"):
        sup = runtime.supervisor(role)
        if sup.answers():
            for name in sup.programs():
                sup.stop_program(name)
            sup.shutdown()


def test_it_restarts_an_exporter_killed_with_sigkill(runtime):
    port = free_port()
    spec = ServiceSpec(
        "sw-exporter",
        [
            sys.executable,
            "-m",
            "exporters",
            "sw-exporter",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
        ],
        port=port,
        liveness_path="/metrics",
    )
    [state] = runtime.start("agent", [spec])
    assert state.running and state.health == "ok"
    os.kill(state.pid, signal.SIGKILL)
    killed = time.monotonic()
    again = wait_for(_healthy_again(runtime, "agent", spec, state.pid), timeout=BACKOFF)
    assert time.monotonic() - killed < BACKOFF
    assert again.pid != state.pid
    log = runtime.supervisor("agent").dir / "logs" / "supervisord.log"
    assert "exited: sw-exporter (terminated by SIGKILL" in log.read_text()
    [stopped] = runtime.stop("agent", [spec])
    assert stopped.state == "stopped"
    assert exited(again.pid)


def _api_server_spec(tmp_path) -> ServiceSpec:
    from maccli.master.specs import master_specs
    from node.config import NodeConfig

    port = free_port()
    data = tmp_path / "data"
    env = {
        "MAC_DATA_DIR": str(data),
        "MAC_MASTER_PORT": str(port),
        "MAC_MASTER_BIND": "127.0.0.1",
        "MAC_API_WORKERS": "2",
        "MAC_SECRET_KEY": "test-supervision-secret-key-not-for-production-0123456789",
        "MAC_PROBE_INTERVAL": "3600",
        "MAC_API_INTERNAL_PORT": str(free_port()),
    }
    cfg = NodeConfig.load(environ={**os.environ, **env})
    [api] = [spec for spec in master_specs(cfg) if spec.name == "api-server"]
    api.env.update(env)
    api.env.pop("DATABASE_URL", None)
    # SQLite in the data folder: this server needs nothing from the test database.
    api.env["DATABASE_URL"] = f"sqlite:///{data / 'mac.sqlite3'}"
    return api


def test_it_restarts_the_api_server_and_removes_the_orphaned_workers(runtime, tmp_path):
    spec = _api_server_spec(tmp_path)
    [state] = runtime.start("master", [spec])
    assert state.running and state.health == "ok", state
    master = psutil.Process(state.pid)
    workers = master.children()
    assert len(workers) == 2

    master.send_signal(signal.SIGKILL)  # its workers are orphaned, still holding the port
    again = wait_for(_healthy_again(runtime, "master", spec, state.pid), timeout=BACKOFF + 15)
    _gone, alive = psutil.wait_procs(workers, timeout=5)
    assert not [proc for proc in alive if proc.status() != psutil.STATUS_ZOMBIE]
    new_master = psutil.Process(again.pid)
    assert "gunicorn" in " ".join(new_master.cmdline())
    log = runtime.log_file("master", "api-server").read_text(errors="replace")
    assert "leftover process(es)" in log
    assert "Address already in use" not in log

    family = [new_master, *new_master.children()]
    runtime.stop("master", [spec])
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert not [proc for proc in alive if proc.status() != psutil.STATUS_ZOMBIE]


CRASHER = """
import http.server, os, sys
marker, port = sys.argv[1], int(sys.argv[2])
if os.path.exists(marker):
    print("cannot start: the marker says so", flush=True)
    sys.exit(4)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_a_crash_loop_is_retried_with_growing_delays_and_recovers(runtime, tmp_path):
    script = tmp_path / "crasher.py"
    script.write_text(CRASHER)
    marker = tmp_path / "broken"
    port = free_port()
    spec = ServiceSpec(
        "crasher", [sys.executable, str(script), str(marker), str(port)],
        port=port, liveness_path="/",
    )  # fmt: skip
    [state] = runtime.start("agent", [spec])
    assert state.running
    marker.touch()  # from now on every start fails at once
    os.kill(state.pid, signal.SIGKILL)
    log = runtime.supervisor("agent").dir / "logs" / "supervisord.log"

    def spawns() -> list[datetime]:
        lines = [line for line in log.read_text().splitlines() if "spawned: 'crasher'" in line]
        return [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in lines]

    wait_for(lambda: len(spawns()) >= 6, timeout=30)  # the first start, then five retries
    assert runtime.supervisor("agent").last_exit("crasher") == "4"
    times = spawns()[1:]
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]
    # supervisord's backoff: 1 s, 2 s, 3 s... (to its one-second tick)
    assert gaps[0] >= 0.9 and gaps[-1] >= gaps[0] + 1.5, gaps
    marker.unlink()  # the cause is fixed: the next retry comes up and stays
    wait_for(_healthy_again(runtime, "agent", spec, state.pid), timeout=BACKOFF)


CHATTY = """
import sys, time
for i in range(4000):
    print(f"line {i:05d} " + "x" * 60, flush=True)
time.sleep(60)
"""


def test_its_logs_rotate_by_size(runtime, tmp_path):
    runtime.log_max_bytes, runtime.log_backups = 20000, 2  # MAC_LOG_MAX_BYTES, MAC_LOG_BACKUPS
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    spec = ServiceSpec("chatty", [sys.executable, str(script)])
    runtime.start("agent", [spec])
    log = runtime.log_file("agent", "chatty")
    every = lambda: sorted(log.parent.glob("chatty.log*"))  # noqa: E731
    wait_for(lambda: any("line 03999" in path.read_text() for path in every()), timeout=15)
    backups = sorted(log.parent.glob("chatty.log.*"))
    assert [path.name for path in backups] == ["chatty.log.1", "chatty.log.2"]
    assert log.stat().st_size <= 20000 + 200
    runtime.stop("agent", [spec])


SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_port_held_by_another_process_is_named_not_reported_running(runtime, tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    # A leftover that even answers the liveness URL: "running ok" would be a lie.
    squatter = subprocess.Popen([sys.executable, str(script), str(port)])
    try:
        wait_for(lambda: _answers(port), timeout=10)
        spec = ServiceSpec(
            "svc", [sys.executable, str(script), str(port)], port=port, liveness_path="/health"
        )
        with pytest.raises(CliError) as caught:
            runtime.start("agent", [spec])
        message = caught.value.message
        assert f"port {port} is already in use by pid {squatter.pid}" in message
        assert str(script) in message
        assert caught.value.commands[0] == f"kill {squatter.pid}"
    finally:
        squatter.kill()
        squatter.wait()


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def test_a_killed_supervisord_leaves_nothing_that_mac_stop_misses(runtime, tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    spec = ServiceSpec(
        "svc", [sys.executable, str(script), str(port)], port=port, liveness_path="/health"
    )
    [state] = runtime.start("agent", [spec])
    sup = runtime.supervisor("agent")
    os.kill(sup.daemon_pid(), signal.SIGKILL)  # its services run on, unsupervised
    wait_for(lambda: not sup.answers(), timeout=5)
    [orphan] = runtime.status("agent", [spec])
    assert orphan.running and orphan.pid == state.pid
    assert "not supervised" in orphan.detail
    runtime.stop("agent", [spec])
    assert exited(state.pid)
    assert not re.search(r"\.pid$", " ".join(os.listdir(runtime.role_dir("agent"))))
