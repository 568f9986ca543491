"""The Docker master as `mac` sees it, with the stand-in docker (tests/maccli/fake_docker.py)
and `docker exec` / `docker run` answered here: `mac status master` lists mac-redis and
counts each container's own check (a wedged worker is not healthy), and the admin
password made in the api-server's container reaches `mac start master` once, from the
data volume, never from the container's log."""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from maccli.master.preflight import PORT_SETTINGS
from tests.maccli.conftest import FAKE_DOCKER

# `docker exec` and `docker run` over the stand-in: the containers' checks answer unless
# a file wedged-<container> says otherwise; the mac-data volume is a folder of the state.
EXEC_AND_RUN = """
import os, sys
from pathlib import Path

state = Path(os.environ["FAKE_DOCKER_STATE"])
args = sys.argv[1:]
volume = state / "mac-data"
if args[0] == "exec":
    container, argv = args[1], args[2:]
    with (state / "exec.log").open("a") as log:
        log.write(" ".join(args) + "\\n")
    if argv[0] == "cat":
        path = volume / Path(argv[1]).relative_to("/var/lib/mac")
        if not path.exists():
            sys.exit(f"cat: {argv[1]}: No such file or directory")
        sys.stdout.write(path.read_text())
        sys.exit(0)
    if (state / f"wedged-{container}").exists():
        sys.exit("Error: No nodes replied within time constraint")
    print("PONG" if argv[0] == "redis-cli" else "pong")
    sys.exit(0)
if args[0] == "run":
    # docker run --rm -v mac_mac-data:/var/lib/mac --entrypoint rm IMAGE -f PATH
    assert "mac_mac-data:/var/lib/mac" in args, args
    assert args[args.index("--entrypoint") + 1] == "rm", args
    (volume / Path(args[-1]).relative_to("/var/lib/mac")).unlink(missing_ok=True)
    sys.exit(0)
os.execv(sys.executable, [sys.executable, FAKE, *args])
"""


class _AnswersOk(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def docker_master(mac_env, docker):
    """`mac` with the docker runtime over the stand-in, every published port answered by
    one real server (the stand-in runs no container)."""
    wrapper = docker / "docker.py"
    wrapper.write_text(f"FAKE = {FAKE_DOCKER!r}\n{EXEC_AND_RUN}")
    bin_docker = Path(mac_env.env["PATH"].split(":")[0]) / "docker"
    bin_docker.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{wrapper}" "$@"\n')
    (docker / "containers.json").write_text("[]")
    (docker / "mac-data").mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnswersOk)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = str(server.server_address[1])
    mac_env.env.update({name: port for name in PORT_SETTINGS})
    mac_env.env.update(
        {"MAC_RUNTIME": "docker", "MAC_DATA_DIR": str(mac_env.root / "data"), "COLUMNS": "300"}
    )
    yield mac_env
    server.shutdown()
    server.server_close()


def _health(status_stdout: str) -> dict[str, str]:
    """SERVICE -> HEALTH of `mac status master`'s table."""
    rows = {}
    for line in status_stdout.splitlines():
        cells = [cell.strip() for cell in line.split("  ") if cell.strip()]
        if len(cells) >= 3 and cells[0] in {"redis", "api-server", "worker", "beat", "proxy"}:
            rows[cells[0]] = cells[2]
    return rows


def test_status_lists_mac_redis_and_counts_a_wedged_worker(docker_master, docker):
    started = docker_master.run("start", "master")
    assert started.returncode == 0, started.stdout + started.stderr

    healthy = docker_master.run("status", "master")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    health = _health(healthy.stdout)
    assert health["redis"] == health["worker"] == health["api-server"] == "ok", health
    asked = (docker / "exec.log").read_text()
    assert "exec mac-redis redis-cli ping" in asked
    # The worker's own node name, as Celery's %h makes it in its container.
    assert 'inspect ping -t 2 -d "mac-worker@$HOSTNAME"' in asked

    (docker / "wedged-mac-worker").touch()
    wedged = docker_master.run("status", "master")
    assert wedged.returncode == 1, wedged.stdout
    assert "No nodes replied" in _health(wedged.stdout)["worker"], wedged.stdout


def test_the_admin_password_is_printed_by_start_once_from_the_data_volume(docker_master, docker):
    said = (
        "Created admin user 'admin' with password: pw-made-in-the-container\n"
        "It is shown only now; change it at /admin/password_change/ "
        "or set MAC_ADMIN_PASSWORD and rerun `manage.py createadmin`."
    )
    kept = docker / "mac-data" / "createadmin.txt"
    kept.write_text(said + "\n")

    started = docker_master.run("start", "master")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "Admin:       Created admin user 'admin' with password: pw-made-in-the-container" in (
        started.stdout
    )
    assert "docker logs mac-api-server" not in started.stdout
    assert not kept.exists()  # removed once shown

    again = docker_master.run("start", "master")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "pw-made-in-the-container" not in again.stdout
    assert "Admin:" not in again.stdout  # the container said nothing since
