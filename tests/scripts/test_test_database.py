"""scripts/test's PostgreSQL: the default login, and a role of the tests' own where the
server asks postgres for a password (Debian 12's pg_hba.conf: scram-sha-256 on 127.0.0.1).

The script is the real one, copied into a sandbox (tests/scripts/sandbox.py) with a
stand-in for its bootstrap and its .venv; psql and runuser are fakes that keep the server's
roles and databases in the sandbox. The fake psql lets a TCP client in as the server would:
with `trust`, any role; with scram, a role with a password, given that password.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scripts.sandbox import Sandbox, needs_tools

pytestmark = pytest.mark.skipif(bool(needs_tools()), reason=str(needs_tools()))

DEFAULT = "postgres://postgres@127.0.0.1:5432/test"

FAKE_PSQL = r'''
"""psql against a server kept in FAKE_STATE/pg: roles/NAME (its password), databases/NAME
(its owner), mode (trust or scram, for TCP logins). Local-socket use (runuser -u postgres)
runs the SQL on stdin, of which it knows the statements scripts/test sends."""
import os, re, sys
from pathlib import Path
from urllib.parse import urlsplit

pg = Path(os.environ["FAKE_STATE"]) / "pg"
args = sys.argv[1:]
target = args[args.index("-d") + 1] if "-d" in args else ""
if "://" in target:  # a client over TCP
    url = urlsplit(target)
    role = pg / "roles" / (url.username or "")
    password = url.password or os.environ.get("PGPASSWORD", "")
    if (pg / "mode").read_text().strip() == "trust":
        ok = role.exists()
    else:
        ok = role.exists() and role.read_text() != "" and role.read_text() == password
    if not ok:
        why = "password authentication failed" if password else "no password supplied"
        sys.exit(f'psql: error: connection to server at "127.0.0.1", port 5432 failed: {why}')
    sys.exit(0)
if os.environ.get("FAKE_USER") != "postgres":
    sys.exit('psql: error: FATAL:  Peer authentication failed for user "postgres"')
if (pg / "peer-refused").exists():
    sys.exit('psql: error: FATAL:  Peer authentication failed for user "postgres"')
sql = sys.stdin.read()
(pg / "admin-sql").open("a").write(sql)
for name in re.findall(r"CREATE ROLE (\w+);", sql):
    role = pg / "roles" / name
    if not role.exists():
        role.write_text("")
for name, password in re.findall(r"ALTER ROLE (\w+) WITH LOGIN CREATEDB PASSWORD '(\w+)';", sql):
    (pg / "roles" / name).write_text(password)
for name, owner in re.findall(r"'CREATE DATABASE (\w+) OWNER (\w+)'", sql):
    database = pg / "databases" / name
    if not database.exists():
        database.write_text(owner)
'''
FAKE_RUNUSER = r"""
[ "$1" = -u ] || exit 1
user=$2; shift 2; [ "$1" = -- ] && shift
FAKE_USER=$user exec "$@"
"""
# The tests' own .venv: pytest writes down the DATABASE_URL it got, and removes the
# --basetemp folder scripts/test made for it.
VENV_PYTHON = r"""#!/bin/sh
printf '%s\n' "python $*" >> "$FAKE_CALLS"
case " $* " in
  *" -m pytest "*)
    printf '%s\n' "$DATABASE_URL" > "$FAKE_STATE/pytest-database-url"
    while [ $# -gt 0 ]; do [ "$1" = --basetemp ] && rmdir "$2"; shift; done ;;
esac
"""


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return make_box(tmp_path)


def make_box(root: Path) -> Sandbox:
    box = Sandbox(root)
    box.script("test")
    box.write("scripts/bootstrap", '#!/bin/sh\necho "bootstrap" >> "$FAKE_CALLS"\n', 0o755)
    box.write(".venv/bin/python", VENV_PYTHON, 0o755)
    for tool in ("ruff", "lint-imports"):
        box.write(f".venv/bin/{tool}", "#!/bin/sh\nexit 0\n", 0o755)
    (box.state / "psql.py").write_text(FAKE_PSQL)
    box.fake("psql", f'exec {sys.executable} "$FAKE_STATE/psql.py" "$@"\n')
    box.fake("runuser", FAKE_RUNUSER)
    box.fake("sudo", 'exec "$@"\n')
    for folder in ("roles", "databases"):
        (box.state / "pg" / folder).mkdir(parents=True)
    (box.state / "pg" / "roles" / "postgres").write_text("")  # no password, as Debian makes it
    return box


def server(box: Sandbox, mode: str) -> None:
    (box.state / "pg" / "mode").write_text(mode)


def run_tests(box: Sandbox, **env: str):
    done = box.run("test", "tests/some_test.py", MAC_DATA_DIR=str(box.root / "data"), **env)
    url = box.state / "pytest-database-url"
    return done, (url.read_text().strip() if url.exists() else None)


def logs_in(box: Sandbox, url: str) -> bool:
    """What the fake server says to a client with this URL."""
    return (
        box.run_command(
            [str(box.bin / "psql"), "-w", "-X", "-Atq", "-d", url, "-c", "SELECT 1"]
        ).returncode
        == 0
    )


def test_where_postgres_gets_in_the_default_is_used_and_nothing_is_made(box: Sandbox) -> None:
    server(box, "trust")
    done, url = run_tests(box)
    assert done.returncode == 0, done.stdout + done.stderr
    assert url == DEFAULT
    assert not box.called("runuser")
    assert sorted(p.name for p in (box.state / "pg" / "roles").iterdir()) == ["postgres"]
    assert not (box.repo / ".mac-data").exists()
    assert not [line for line in done.stdout.splitlines() if line.startswith("==> PostgreSQL")]


def test_where_postgres_needs_a_password_the_tests_get_a_role_of_their_own(box: Sandbox) -> None:
    server(box, "scram")
    done, url = run_tests(box)
    assert done.returncode == 0, done.stdout + done.stderr
    assert url is not None and url != DEFAULT
    assert url.startswith("postgres://mac_test:") and url.endswith("@127.0.0.1:5432/test")
    # The password never on a command line (ps shows those): only on psql's stdin, in its
    # environment, and in the 0600 file.
    password = url.split(":")[2].split("@")[0]
    assert len(password) == 32
    assert password not in box.calls.read_text()
    assert logs_in(box, url), url
    # The database `test`, which the role owns; made by postgres over the local socket.
    assert (box.state / "pg" / "databases" / "test").read_text() == "mac_test"
    assert box.called("runuser")[0].startswith("-u postgres -- ")
    kept = box.repo / ".mac-data" / "test-database-url"
    assert kept.read_text().strip() == url
    assert kept.stat().st_mode & 0o777 == 0o600
    # Said in one line.
    said = [line for line in done.stdout.splitlines() if line.startswith("==> PostgreSQL")]
    assert len(said) == 1 and "set up role mac_test" in said[0] and str(kept.name) in said[0]
    assert "pg_hba.conf unchanged" in said[0]


def test_the_role_made_once_is_used_again_without_root(box: Sandbox) -> None:
    server(box, "scram")
    first, url = run_tests(box)
    assert first.returncode == 0, first.stderr
    box.calls.write_text("")
    (box.bin / "runuser").unlink()  # no root needed any more

    again, url_again = run_tests(box)
    assert again.returncode == 0, again.stdout + again.stderr
    assert url_again == url
    assert "the tests log in as mac_test" in again.stdout


def test_a_kept_url_that_no_longer_logs_in_gets_a_new_password(box: Sandbox) -> None:
    server(box, "scram")
    first, url = run_tests(box)
    assert first.returncode == 0, first.stderr
    (box.state / "pg" / "roles" / "mac_test").write_text("changedelsewhere")

    again, url_again = run_tests(box)
    assert again.returncode == 0, again.stdout + again.stderr
    assert url_again != url and logs_in(box, url_again)
    assert (box.repo / ".mac-data" / "test-database-url").read_text().strip() == url_again
    assert (box.state / "pg" / "databases" / "test").read_text() == "mac_test"


def test_mac_test_database_url_wins_and_nothing_is_asked(box: Sandbox) -> None:
    server(box, "scram")
    given = "postgres://someone:secret@db.example:5433/suite"
    done, url = run_tests(box, MAC_TEST_DATABASE_URL=given)
    assert done.returncode == 0, done.stderr
    assert url == given
    assert not box.called("psql") and not box.called("runuser")


def test_a_role_that_cannot_be_made_stops_the_run_with_what_to_do(box: Sandbox) -> None:
    server(box, "scram")
    (box.state / "pg" / "peer-refused").touch()
    done, url = run_tests(box)
    assert done.returncode != 0
    assert url is None, "pytest ran on a database it cannot log in to"
    assert "Peer authentication failed" in done.stderr
    assert "MAC_TEST_DATABASE_URL=" in done.stderr
    assert not (box.repo / ".mac-data" / "test-database-url").exists()


def test_without_psql_the_default_is_used_as_before(box: Sandbox) -> None:
    (box.bin / "psql").unlink()
    done, url = run_tests(box)
    assert done.returncode == 0, done.stderr
    assert url == DEFAULT


# --- The same against a real PostgreSQL with Debian 12's pg_hba.conf, real psql and
# runuser: a cluster of the test's own, on 127.0.0.1:5432 and /run/postgresql of a network
# and mount namespace of its own, so that the machine's server, port and socket are never
# seen, let alone changed.

INITDB = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
NAMESPACE_TOOLS = ("unshare", "nsenter", "runuser", "psql", "ip", "mount")
# What pg_createcluster writes on Debian 12 (postgresql-common's defaults).
DEBIAN_HBA = """\
local   all             postgres                                peer
local   all             all                                     peer
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     peer
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
"""
# Inside the namespaces: loopback up, a private /run/postgresql, the cluster on 5432;
# says its pid (for nsenter), then waits for a line on stdin and stops the cluster.
NAMESPACE = r"""
set -euo pipefail
ip link set lo up
mount --bind "$PG_SOCKETS" /run/postgresql
pg() { runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_DATA" "$@" >/dev/null; }
pg -l "$PG_ROOT/log" -w -o "-p 5432 -k /run/postgresql -c listen_addresses=127.0.0.1" start
trap 'pg -m fast -w stop' EXIT
echo "ready $$"
read -r _
"""


@contextlib.contextmanager
def debian_postgres() -> Iterator[tuple[list[str], Path]]:
    """The cluster; yields the prefix that runs a command in its namespaces, and its
    pg_hba.conf."""
    pg_bin = Path(INITDB[-1]).parent
    # Not under pytest's tmp_path: the server runs as postgres, which cannot enter it.
    root = Path(tempfile.mkdtemp(prefix="mac-test-pg-"))
    inside = None
    try:
        root.chmod(0o755)
        sockets = root / "sockets"
        sockets.mkdir()
        for path in (root, sockets):
            shutil.chown(path, "postgres")
        data = root / "data"
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(pg_bin / "initdb"), "-D", str(data),
             "-U", "postgres", "--auth-local=peer", "--auth-host=scram-sha-256"],
            check=True, capture_output=True, cwd="/", timeout=120,
        )  # fmt: skip
        hba = data / "pg_hba.conf"
        hba.write_text(DEBIAN_HBA)
        env = {
            "PATH": os.environ["PATH"],
            "PG_BIN": str(pg_bin),
            "PG_DATA": str(data),
            "PG_ROOT": str(root),
            "PG_SOCKETS": str(sockets),
        }
        inside = subprocess.Popen(
            ["unshare", "--net", "--mount", "--fork", "bash", "-c", NAMESPACE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, cwd="/",
        )  # fmt: skip
        ready = inside.stdout.readline().split()
        if ready[:1] != ["ready"]:
            inside.wait(30)
            log = root / "log"
            pytest.fail(f"the private cluster did not start: {inside.stderr.read()}"
                        f"{log.read_text() if log.exists() else ''}")  # fmt: skip
        yield [shutil.which("nsenter"), "-t", ready[1], "-n", "-m", "--"], hba
    finally:
        if inside is not None:
            try:
                inside.communicate("\n", timeout=60)
            except subprocess.TimeoutExpired:
                inside.kill()
                inside.wait()
        shutil.rmtree(root, ignore_errors=True)


def _psql(there: list[str], *args: str, password: str = "", as_postgres: bool = False):
    """psql in the cluster's namespaces: as postgres over its socket, or over TCP with
    PASSWORD (in the environment, as scripts/test gives it)."""
    env = {key: value for key, value in os.environ.items() if key != "PGPASSWORD"}
    if password:
        env["PGPASSWORD"] = password
    runuser = ["runuser", "-u", "postgres", "--"] if as_postgres else []
    return subprocess.run(
        [*there, *runuser, "psql", "-w", "-X", "-Atq", *args],
        env=env, capture_output=True, text=True, timeout=60, cwd="/",
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="a network and mount namespace needs root")
@pytest.mark.skipif(
    not INITDB or not all(shutil.which(tool) for tool in NAMESPACE_TOOLS),
    reason=f"PostgreSQL's server or one of {', '.join(NAMESPACE_TOOLS)} is not installed",
)
@pytest.mark.skipif(not Path("/run/postgresql").is_dir(), reason="no /run/postgresql to cover")
def test_on_debians_own_pg_hba_the_tests_role_is_made_and_works() -> None:
    # Where postgres (psql run by runuser) can reach the sandbox's PATH: not pytest's tmp_path.
    root = Path(tempfile.mkdtemp(prefix="mac-test-sandbox-"))
    try:
        root.chmod(0o755)
        _made_and_working(make_box(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _made_and_working(box: Sandbox) -> None:
    for real in ("psql", "runuser"):
        (box.bin / real).unlink()
        (box.bin / real).symlink_to(shutil.which(real))
    with debian_postgres() as (there, hba):
        before = hba.read_bytes()
        default = "postgres://postgres@127.0.0.1:5432/postgres"
        refused = _psql(there, "-d", default, "-c", "SELECT 1")
        assert refused.returncode != 0 and "password" in refused.stderr  # the fresh machine

        done = box.run("test", "tests/some_test.py", MAC_DATA_DIR=str(box.root / "data"),
                       prefix=there)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        url = (box.state / "pytest-database-url").read_text().strip()
        assert url.startswith("postgres://mac_test:"), url
        password = url.split(":")[2].split("@")[0]

        role = _psql(there, "-d", "postgres", "-c",
                     "SELECT rolcanlogin, rolcreatedb, rolsuper FROM pg_roles"
                     " WHERE rolname = 'mac_test'", as_postgres=True)  # fmt: skip
        assert role.stdout.strip() == "t|t|f", role.stderr
        owner = _psql(there, "-d", "postgres", "-c",
                      "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'test'",
                      as_postgres=True)  # fmt: skip
        assert owner.stdout.strip() == "mac_test", owner.stderr
        # What pytest-django does with it: a test database of its own, made and dropped.
        server = "postgres://mac_test@127.0.0.1:5432/postgres"
        for sql in ("CREATE DATABASE test_probe", "DROP DATABASE test_probe"):
            made = _psql(there, "-d", server, "-c", sql, password=password)
            assert made.returncode == 0, made.stderr
        assert hba.read_bytes() == before

        # The next run logs in with what it kept, and changes nothing.
        box.calls.write_text("")
        again = box.run("test", "tests/some_test.py", MAC_DATA_DIR=str(box.root / "data"),
                        prefix=there)  # fmt: skip
        assert again.returncode == 0, again.stdout + again.stderr
        assert (box.state / "pytest-database-url").read_text().strip() == url
        assert "the tests log in as mac_test" in again.stdout
        assert not box.called("runuser")
