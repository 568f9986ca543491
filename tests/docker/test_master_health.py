"""The Docker master's health, secrets and admin password on the real engine: every
container but mac-beat has its own health check and `mac status master` counts them
(mac-redis listed, a wedged worker failing), the secrets are in the environment of their
readers alone, and the generated admin password reaches `mac start master` once, never
the api-server's log."""

from __future__ import annotations

import os
import re
import signal

import pytest

from testkit.waiting import wait_for
from tests.docker.conftest import METRICS_TOKEN

# netns too: the engine runs in a namespace of its own (runs with `-m netns` only).
pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
CHECKED = ("mac-redis", "mac-api-server", "mac-proxy", "mac-worker", "mac-prometheus",
           "mac-alertmanager")  # fmt: skip


def _health(master) -> dict[str, str]:
    return {
        name: (row["State"].get("Health") or {}).get("Status", "")
        for name, row in master.containers().items()
    }


def _rows(stdout: str) -> dict[str, list[str]]:
    """SERVICE -> its cells (STATE, HEALTH...) of `mac status master`'s table."""
    cells = (re.split(r"\s{2,}", line.strip()) for line in stdout.splitlines()[2:])
    return {row[0]: row for row in cells if row[0]}


def test_every_master_container_but_beat_reports_its_health(docker_master):
    wait_for(
        lambda: all(_health(docker_master).get(name) == "healthy" for name in CHECKED),
        timeout=120, interval=1.0, what="every master container healthy",
    )  # fmt: skip
    assert _health(docker_master)["mac-beat"] == ""  # beat answers nothing
    status = docker_master.mac("status", "master")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = _rows(status.stdout)
    for name in ("redis", "worker", "api-server"):
        assert rows[name][1:3] == ["Up (healthy)", "ok"], status.stdout


def test_a_wedged_worker_fails_mac_status_and_its_health_check(docker_master):
    wait_for(
        lambda: _health(docker_master).get("mac-worker") == "healthy",
        timeout=120, interval=1.0, what="mac-worker healthy",
    )  # fmt: skip
    pid = docker_master.containers()["mac-worker"]["State"]["Pid"]
    os.kill(pid, signal.SIGSTOP)  # Celery's main process: it answers no ping
    try:
        wide = {**docker_master.env, "COLUMNS": "300"}  # the health's words on one line
        status = docker_master.mac("status", "master", env=wide)
        assert status.returncode == 1, status.stdout
        worker = _rows(status.stdout)["worker"]
        assert worker[1].startswith("Up") and "No nodes replied" in worker[2], status.stdout
        wait_for(
            lambda: _health(docker_master).get("mac-worker") == "unhealthy",
            timeout=90, interval=1.0, what="mac-worker unhealthy",
        )  # fmt: skip
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(
        lambda: docker_master.mac("status", "master").returncode == 0,
        timeout=120, interval=2.0, what="the worker answering again",
    )  # fmt: skip


def test_secrets_are_in_the_environment_of_their_readers_alone(docker_master):
    rows = docker_master.containers()

    def env(name: str) -> dict[str, str]:
        entries = rows[name]["Config"]["Env"] or []
        return dict(entry.partition("=")[::2] for entry in entries)

    for name in ("mac-api-server", "mac-prometheus"):
        assert env(name).get("MAC_METRICS_TOKEN") == METRICS_TOKEN, name
    for name in ("mac-proxy", "mac-worker", "mac-beat", "mac-alertmanager", "mac-redis"):
        assert "MAC_METRICS_TOKEN" not in env(name), name
        assert not any(METRICS_TOKEN in value for value in env(name).values()), name
    assert env("mac-proxy")["MAC_PROBE_INTERVAL"] == "3"  # the other settings still reach it


def test_the_generated_admin_password_is_shown_once_and_kept_out_of_the_log(docker_master):
    shown = re.search(
        r"Admin: +Created admin user 'admin' with password: (\S+)", docker_master.started
    )
    assert shown, docker_master.started
    password = shown.group(1)
    logs = docker_master.engine.docker("logs", "mac-api-server")
    assert logs.returncode == 0, logs.stderr
    assert password not in logs.stdout + logs.stderr
    assert "admin user" not in (logs.stdout + logs.stderr).lower()
    # Read and removed by the start that showed it. (A container recreated since, by an
    # earlier test's `docker rm`, may have said "exists" there again: no password.)
    kept = docker_master.engine.docker(
        "exec", "mac-api-server", "cat", "/var/lib/mac/createadmin.txt"
    )
    assert password not in kept.stdout, "the password stays in the data volume"
    # The password shown is the admin's.
    check = (
        "from django.contrib.auth import authenticate; "
        f"print(authenticate(username='admin', password={password!r}) is not None)"
    )
    answer = docker_master.engine.docker(
        "exec", "mac-api-server", "python", "-m", "django", "shell", "-c", check
    )
    assert answer.stdout.strip().endswith("True"), answer.stdout + answer.stderr
