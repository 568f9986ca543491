"""A PostgreSQL frozen between a transaction's last statement and its COMMIT: fails in time.

Issue 26: statements had a client-side deadline (macweb.db_deadline), but COMMIT and
ROLLBACK went straight to the driver, so a freeze that began after the last statement
held its thread as long as the freeze. The process here runs Django as the master
does (macweb.postgresql, the pool, MAC_DB_STATEMENT_TIMEOUT) against a PostgreSQL of
the test's own, runs one statement in a transaction, and is frozen (SIGSTOP on every
server process) before it commits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.healthcheck.private_servers import Frozen, PrivatePostgres
from tests.inventory.liveserver import REPO

pytestmark = pytest.mark.slow

STATEMENT_TIMEOUT = 1.0
DEADLINE = STATEMENT_TIMEOUT + 1.0  # macweb.db_deadline.DEADLINE_MARGIN
FROZEN_FOR = 15.0
SLACK = 2.0  # a loaded 2-core CI machine

# One statement in a transaction, a cue to wait for, then COMMIT; how it ended and when.
COMMIT_ON_CUE = """
import sys, time
from django.db import DatabaseError, connection, connections, transaction
connection.ensure_connection()
print("engine", type(connections["default"]).__module__, flush=True)
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE IF NOT EXISTS mac_commit_probe (n int)")
try:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO mac_commit_probe VALUES (1)")
        print("ready", flush=True)
        sys.stdin.readline()
        started = time.monotonic()
    outcome = "committed"
except DatabaseError as exc:
    outcome = "failed"
    print(exc, file=sys.stderr)
print(outcome, round(time.monotonic() - started, 2), flush=True)
"""


@pytest.fixture
def database():
    """A PostgreSQL cluster of the test's own: the shared one is never frozen."""
    pg = PrivatePostgres()
    pg.start()
    yield pg
    pg.remove()


def test_a_freeze_before_commit_fails_within_the_deadline(tmp_path, database):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MAC_")},
        "DJANGO_SETTINGS_MODULE": "macweb.settings",
        "DATABASE_URL": database.url(),
        "MAC_DATA_DIR": str(tmp_path),
        "MAC_SECRET_KEY": "test-commit-deadline-secret-key-0123456789abcdef",
        "MAC_DB_STATEMENT_TIMEOUT": str(STATEMENT_TIMEOUT),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "shell", "--no-imports", "-c", COMMIT_ON_CUE],
        env=env, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    engine = ""
    for line in process.stdout:
        engine = line.split()[1] if line.startswith("engine") else engine
        if line.strip() == "ready":
            break
    else:
        pytest.fail(f"the process did not get ready: {process.communicate()}")
    assert engine == "macweb.postgresql.base"

    with Frozen(database) as frozen:
        process.stdin.write("commit\n")
        process.stdin.flush()
        out, err = process.communicate(timeout=FROZEN_FOR + 60)
        answered_while_frozen = time.monotonic() - frozen.since < FROZEN_FOR
        time.sleep(max(0.0, FROZEN_FOR - (time.monotonic() - frozen.since)))

    outcome, took = out.strip().splitlines()[-1].split()
    assert outcome == "failed", out + err
    assert float(took) < DEADLINE + SLACK, out
    assert answered_while_frozen
    assert "no answer from the database server to COMMIT" in err, err
