"""The process runtime: supervised services with pid and log files, stale pid files, stop grace.

Supervision itself (restarts, backoff, log rotation, the port checks) is in
test_supervision.py; the systemd unit in test_systemd_units.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from maccli.output import CliError
from maccli.runtimes.base import ServiceSpec
from maccli.runtimes.process import ProcessRuntime
from maccli.runtimes.supervisor import Supervisor
from testkit.ports import free_port
from testkit.processes import exited

SERVER = """
import http.server, signal, sys
port = int(sys.argv[1])
if len(sys.argv) > 2 and sys.argv[2] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        print("request", self.path, flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture(autouse=True)
def no_supervisord_left(tmp_path):
    """A failed start leaves the role's supervisord up (as on a real host): not here."""
    yield
    for conf in tmp_path.glob("state/*/supervisor/supervisord.conf"):
        Supervisor(conf.parent.parent).shutdown()


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "server.py"
    path.write_text(SERVER)
    return path


def _spec(script, name="svc", *extra, port=None):
    port = port or free_port()
    argv = [sys.executable, str(script), str(port), *extra]
    return ServiceSpec(name, argv, port=port, liveness_path="/health", ready_timeout=15)


def test_start_status_stop_leaves_no_process(tmp_path, script):
    runtime = ProcessRuntime(tmp_path / "state", grace=5)
    spec = _spec(script)
    [state] = runtime.start("agent", [spec])
    assert state.running and state.health == "ok" and state.port == spec.port
    record = json.loads(runtime.pid_file("agent", "svc").read_text())
    assert record["argv"] == spec.argv
    assert runtime.log_file("agent", "svc").exists()
    # Idempotent: a second start keeps the same process.
    [again] = runtime.start("agent", [spec])
    assert again.pid == state.pid
    [stopped] = runtime.stop("agent", [spec])
    assert stopped.state == "stopped"
    assert not runtime.pid_file("agent", "svc").exists()
    assert exited(state.pid)


def test_a_service_ignoring_sigterm_is_killed_after_the_grace(tmp_path, script):
    runtime = ProcessRuntime(tmp_path / "state", grace=0.5)
    spec = _spec(script, "stubborn", "ignore-term")
    [state] = runtime.start("agent", [spec])
    started = time.monotonic()
    runtime.stop("agent", [spec])
    assert time.monotonic() - started < 5
    assert exited(state.pid)


def test_dead_pid_file_is_reported_exited_and_replaced_on_start(tmp_path, script):
    runtime = ProcessRuntime(tmp_path / "state")
    spec = _spec(script)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    runtime.role_dir("agent").mkdir(parents=True)
    runtime.pid_file("agent", "svc").write_text(
        json.dumps({"pid": gone.pid, "argv": spec.argv, "started": time.time()})
    )
    [state] = runtime.status("agent", [spec])
    assert state.state == "exited"
    [state] = runtime.start("agent", [spec])
    assert state.running and state.pid != gone.pid
    runtime.stop("agent", [spec])


def test_reused_pid_is_stale_and_never_signalled(tmp_path, script):
    runtime = ProcessRuntime(tmp_path / "state")
    spec = _spec(script)
    # Our pid file names a live process that is not our service (e.g. after a reboot).
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        runtime.role_dir("agent").mkdir(parents=True)
        runtime.pid_file("agent", "svc").write_text(
            json.dumps({"pid": bystander.pid, "argv": spec.argv, "started": time.time() - 3600})
        )
        [state] = runtime.status("agent", [spec])
        assert state.state == "stale"
        runtime.stop("agent", [spec])
        assert bystander.poll() is None, "a reused pid must never be signalled"
        assert not runtime.pid_file("agent", "svc").exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_a_service_that_dies_at_start_shows_its_log(tmp_path):
    runtime = ProcessRuntime(tmp_path / "state")
    argv = [sys.executable, "-c", "import sys; print('bad config: no such file'); sys.exit(3)"]
    spec = ServiceSpec("broken", argv, port=free_port(), liveness_path="/health")
    with pytest.raises(CliError) as caught:
        runtime.start("agent", [spec])
    assert "broken exited during start-up (exit code 3)" in caught.value.message
    assert "bad config: no such file" in caught.value.hint
    assert caught.value.commands[-1] == "mac start agent"


def test_uptime_comes_from_the_process(tmp_path, script):
    runtime = ProcessRuntime(tmp_path / "state")
    spec = _spec(script)
    runtime.start("agent", [spec])
    try:
        time.sleep(1.1)
        [state] = runtime.status("agent", [spec])
        assert state.uptime is not None and state.uptime >= 1
    finally:
        runtime.stop("agent", [spec])
    assert set(os.listdir(runtime.role_dir("agent"))) == {"logs", ".lock"}


FORKER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_stop_removes_the_orphans_of_a_dead_leader_left_by_an_older_mac(tmp_path):
    # An older mac ran each service alone in its own session, as a gunicorn master with
    # its workers: the master was killed, the workers live on in its process group.
    script = tmp_path / "forker.py"
    script.write_text(FORKER)
    argv = [sys.executable, str(script)]
    leader = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    orphan = int(leader.stdout.readline())
    started = psutil.Process(leader.pid).create_time()
    leader.kill()
    leader.wait()
    runtime = ProcessRuntime(tmp_path / "state", grace=2)
    runtime.role_dir("master").mkdir(parents=True)
    runtime.pid_file("master", "api-server").write_text(
        json.dumps({"pid": leader.pid, "argv": argv, "started": started})
    )
    spec = ServiceSpec("api-server", argv)
    left = psutil.Process(orphan)  # alive, holding what its master held
    [state] = runtime.stop("master", [spec])
    assert state.state == "stopped"
    _gone, alive = psutil.wait_procs([left], timeout=5)
    assert not [proc for proc in alive if proc.status() != psutil.STATUS_ZOMBIE]


def _step(record, word: str, seconds: float = 0.0, fail: bool = False) -> list[str]:
    """A start step that writes when it began and ended, in order, to `record`."""
    code = (
        f"import sys, time; open({str(record)!r}, 'a').write('{word} began\\n'); "
        f"time.sleep({seconds}); open({str(record)!r}, 'a').write('{word} ended\\n'); "
        f"sys.exit({int(fail)})"
    )
    return [sys.executable, "-c", code]


def _events(record) -> list[str]:
    return record.read_text().splitlines()


def test_start_steps_run_side_by_side_but_after_the_services_they_need(tmp_path, script):
    runtime = ProcessRuntime(tmp_path / "state", grace=5)
    record = tmp_path / "steps"
    first = _spec(script, "first")
    first.prestart = [_step(record, "first-1", 1.0), _step(record, "first-2", 0.5)]
    beside = _spec(script, "beside")
    beside.prestart = [_step(record, "beside", 0.5)]
    after = _spec(script, "after")
    after.prestart = [_step(record, "after")]
    after.prestart_after = ("first",)
    states = runtime.start("agent", [first, beside, after])
    assert all(state.running for state in states)
    events = _events(record)
    # Each service's steps in order; another's meanwhile; `after` once `first` is done.
    assert events.index("first-1 ended") < events.index("first-2 began")
    assert events.index("beside began") < events.index("first-1 ended")
    assert events.index("after began") > events.index("first-2 ended")
    runtime.stop("agent", [first, beside, after])


def test_a_steps_system_check_warning_is_shown_at_the_start(tmp_path, script, capsys):
    runtime = ProcessRuntime(tmp_path / "state", grace=5)
    spec = _spec(script, "api-server")
    # As migrate prints Django's system checks (django.core.checks.CheckMessage).
    printed = (
        "System check identified some issues:\n\nWARNINGS:\n"
        "?: (inventory.W001) MAC_TRUSTED_PROXIES=10.0.0.0/8 holds the address of 2 nodes.\n"
        "\tHINT: Name only the reverse proxies' own addresses.\n"
        "?: (models.E999) not a warning\nOperations to perform: nothing\n"
    )
    spec.prestart = [[sys.executable, "-c", f"import sys; sys.stderr.write({printed!r})"]]
    runtime.start("master", [spec])
    runtime.stop("master", [spec])

    shown = capsys.readouterr().err
    assert (
        "Warning: api-server: inventory.W001: MAC_TRUSTED_PROXIES=10.0.0.0/8 holds the address "
        "of 2 nodes. Name only the reverse proxies' own addresses." in shown
    )
    assert "E999" not in shown and "Operations" not in shown


def test_a_failed_step_is_reported_and_what_needs_it_never_begins(tmp_path, script):
    runtime = ProcessRuntime(tmp_path / "state", grace=5)
    record = tmp_path / "steps"
    first = _spec(script, "first")
    first.prestart = [_step(record, "first", 0.5, fail=True), _step(record, "never")]
    beside = _spec(script, "beside")
    beside.prestart = [_step(record, "beside", 1.0)]
    after = _spec(script, "after")
    after.prestart = [_step(record, "after")]
    after.prestart_after = ("first",)
    with pytest.raises(CliError) as failed:
        runtime.start("agent", [first, beside, after])
    assert "first: `" in str(failed.value) and "failed (exit code 1)" in str(failed.value)
    events = _events(record)
    # What runs beside it ends before the start gives up: no step is left running.
    assert events.count("beside ended") == 1
    assert "never began" not in events and "after began" not in events
    # Nothing was started.
    assert all(state.state != "running" for state in runtime.status("agent", [first, beside]))


SLOW_SERVER = """
import sys, time
time.sleep(5)  # up, but not answering yet
exec(open(sys.argv[2]).read())
"""


def test_start_timeout_0_starts_without_waiting_for_an_answer(tmp_path, script):
    """MAC_START_TIMEOUT=0 (docs/settings.md): `mac start` does not wait for an answer."""
    slow = tmp_path / "slow.py"
    slow.write_text(SLOW_SERVER)
    port = free_port()
    argv = [sys.executable, str(slow), str(port), str(script)]
    spec = ServiceSpec("svc", argv, port=port, liveness_path="/health", ready_timeout=0)
    runtime = ProcessRuntime(tmp_path / "state", grace=5)
    started = time.monotonic()
    [state] = runtime.start("agent", [spec])  # raised "does not answer ... after 0 s" before
    assert time.monotonic() - started < 5
    assert state.state in {"starting", "running"} and state.health != "ok"
    # Started all the same: it answers once it is up.
    deadline = time.monotonic() + 20
    while runtime.status("agent", [spec])[0].health != "ok":
        assert time.monotonic() < deadline, runtime.status("agent", [spec])
        time.sleep(0.2)
    runtime.stop("agent", [spec])
