"""Fixtures shared by every test package: users, clients, nodes, a simulated fleet."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from testkit import factories
from testkit.macenv import own_files
from testkit.ports import ContractPortHeld
from testkit.processes import stop_process
from testkit.simfleet import FleetThread, loopback_base
from testkit.waiting import WaitTimeout, wait_http

if TYPE_CHECKING:
    from inventory.models import Node


def netns_marks(*tools: str, slow: bool = True) -> list[pytest.MarkDecorator]:
    """The marks of a test module that builds network namespaces: root and `tools` needed."""
    missing = [tool for tool in tools if not shutil.which(tool)]
    marks = [
        pytest.mark.netns,
        pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
        pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not on PATH"),
    ]
    return [*marks, pytest.mark.slow] if slow else marks


def pytest_configure(config: pytest.Config) -> None:
    """Mark this run's environment, before xdist starts its workers, and stop what a
    killed earlier run left running (testkit.leftovers)."""
    from testkit.leftovers import mark_this_run, stop_leftovers

    ours = mark_this_run()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the run that started this worker looked already
    stopped = stop_leftovers(ours)
    if stopped:
        print(
            f"stopped {len(stopped)} process(es) a killed earlier test run left:\n  "
            + "\n  ".join(stopped),
            file=sys.stderr,
        )


# On a MAC node the agent listens on its contract ports on every address (MAC_BIND's
# default), where the simulated fleets and the tests' own agents listen on loopback
# addresses of theirs: such a test cannot run there. testkit.ports finds that listener
# before anything binds (SimFleet.start, check_contract_ports) and the test is skipped,
# naming the port and the way out; tests/test_hermetic.py shows it on a decoy machine.
def _skip_where_a_contract_port_is_held():
    try:
        return (yield)
    except ContractPortHeld as held:
        raise pytest.skip.Exception(str(held)) from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _skip_where_a_contract_port_is_held())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _skip_where_a_contract_port_is_held())


def pytest_sessionstart(session: pytest.Session) -> None:
    """The data and static folders, made the way `mac start master` makes them.

    The settings create nothing; without the static folder every request handler
    (some built while collecting) would warn that it is missing. The key comes from
    the environment (pyproject's pytest `env`), so no key file is written.
    """
    from django.core.management import call_command
    from django.test.utils import override_settings

    call_command("prepare_master", verbosity=0)
    # A run started in the background (`scripts/test &` from a script) begins with SIGINT
    # ignored, which every process the tests start would inherit: as from a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Cheap passwords for the test process's users (testkit.hashers says why); what the
    # tests prove of logins and their throttle does not depend on the hash's cost.
    override_settings(
        PASSWORD_HASHERS=["testkit.hashers.OneIterationPBKDF2PasswordHasher"]
    ).enable()


@pytest.fixture(scope="session", autouse=True)
def own_mac_files(tmp_path_factory) -> Iterator[Path]:
    """Every file of the node's configuration in this session's own folder, in one place.

    On an operator's master or node, /etc/mango/mac/env and ~/.mac/env hold real settings
    (`mac start agent` writes MAC_AGENT_NETWORK=host there): a test that reads the
    configuration, and every server a test starts (they inherit this environment), must
    see the session's empty files instead: each of node.config.FILE_SETTINGS points here;
    tests that build a `mac` environment of their own (testkit.macenv) still move them
    again, to their own folder. tests/test_hermetic.py shows it on a decoy machine.
    """
    root = tmp_path_factory.mktemp("mac-files")
    with pytest.MonkeyPatch.context() as patch:
        for name, path in own_files(root).items():
            patch.setenv(name, path)
        yield root


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("operator", password="operator-pass")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser("admin", "admin@example.com", "admin-pass")


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def auth_client(api_client, user):
    api_client.force_authenticate(user)
    return api_client


@pytest.fixture
def make_node() -> Callable[..., Node]:
    """make_node(hostname=None, ip=None, *, key=None, **fields) -> a saved Node.

    The state a test starts from, not the behaviour under test: see testkit.factories.
    """
    return factories.make_node


@pytest.fixture
def fleet() -> Iterator[Callable[..., FleetThread]]:
    """start_fleet(count, **kwargs) -> a running FleetThread, stopped after the test."""
    started: list[FleetThread] = []

    def start_fleet(count: int, **kwargs) -> FleetThread:
        kwargs.setdefault("base", loopback_base())
        runner = FleetThread(count, **kwargs).start()
        started.append(runner)
        return runner

    yield start_fleet
    for runner in started:
        runner.stop()


# --- a real master for the end-to-end tests ------------------------------------------------


@dataclass
class LiveMaster:
    port: int
    process: subprocess.Popen
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def live_database_url() -> str:
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

    from testkit.ports import free_port

    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("the end-to-end master runs on PostgreSQL: set DATABASE_URL")
    port = free_port()
    data = tmp_path_factory.mktemp("master-data")
    log = data / "api-server.log"
    env = {
        **os.environ,
        "DATABASE_URL": live_database_url(),
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
    try:
        wait_http(f"{master.url}/health", 60, process=process, interval=0.3)
    except WaitTimeout:
        process.kill()
        pytest.fail(f"the test master did not become healthy:\n{log.read_text()[-3000:]}")
    yield master
    stop_process(process, 10)


@pytest.fixture(autouse=True)
def _fresh_outside_answers():
    """/health remembers what Prometheus, Alertmanager and the scale-out engines answered,
    per address; a test's server on a port another test used must not inherit that answer."""
    from healthcheck.health import forget_outside_answers
    from scraping.engines import forget_engine_checks

    forget_outside_answers()
    forget_engine_checks()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """A test that leaves SIGINT ignored in this process makes every process the later
    tests start ignore Ctrl-C too (an ignored signal survives exec): put it back, and
    name the test in the warnings summary so that it gets fixed."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        item.warn(pytest.PytestWarning(f"{item.nodeid} left SIGINT ignored; restored"))
