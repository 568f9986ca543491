"""The tests' own Redis database and data folder; each pytest-xdist worker's own share of
both, and its own loopback block.

Loaded with `-p testkit.xdistworker` (pyproject's addopts), so it is imported while
pytest reads its options: before pytest-env and pytest-django set up Django, whose
settings read MAC_REDIS_URL once. A plain `pytest` (not through scripts/test) must never
meet a real or dev master there: the settings' defaults are a master's own (Redis
database 0, the checkout's var/, and with it its installation id and cache prefix),
and the tests' fixtures delete the keys they find there. So, when unset (`defaults`):

- MAC_REDIS_URL: MAC_TEST_REDIS_URL, else that setting's default (database 9, as in
  scripts/test);
- MAC_DATA_DIR: a fresh temporary folder, removed when this process ends.

That happens in the controller too, before xdist starts its workers (which inherit
both). pytest-django already gives each worker its own test database (`<name>_gw0`,
`<name>_gw1`); the rest of what the tests share is split here:

- MAC_REDIS_URL: database N + worker number, so Celery queues, sweep locks and the
  channel layer of one worker's masters never meet another's.
- MAC_DATA_DIR: a folder per worker under the given one (prepare_master fills it).

The heavy tests run in two groups, each on one worker, one test after another, as they
did without xdist: `pytest_collection_modifyitems` marks each test's xdist group, which
`--dist loadgroup` keeps together.

- `heavy`: those that own something of the whole host (network namespaces, iptables,
  systemd-nspawn, the Slurm lab), with the slow tests of their modules, and the slow ones
  that run the master's services against deadlines (`slow`: alerting, sweeps, faults);
- `commands`: the slow tests of the `mac` command itself (tests/maccli: masters and
  agents started as processes, the scale-out engines), which own nothing of the host
  (free ports, their own folders). Alone in `heavy` they made it the run's length: the
  other workers idled for its last ten minutes (CI at 30 minutes, stop 53). Those with
  a promise too fine for a second deadline stream beside them stay in `heavy`
  (SHARED_CORES_TOO_COARSE).

Each worker takes quick tests once its group is nearly done, at a low CPU priority (as
root), so the groups still running keep the cores they would share among themselves: on
CI's two cores, three streams of deadline tests at most (heavy, commands, Docker).

The Docker tests are a group of their own, which loadgroup starts on a worker of its
own (the three groups are its largest units of work, handed out first, one to each
worker; a worker is given more only once it has two tests or fewer left to run):
they share one private engine in a network namespace of its own (testkit.docker_engine),
so they own nothing of the host's that the heavy tests touch. They run at the heavy
tests' priority: dockerd, started by their first test, and every container inherit it,
and at the quick tests' priority CI's run starved them (stop 38: the Docker master's
/health not within 120 s). Alone on the heavy worker they were a third of its time while
the other worker idled for half the run (issue 34: CI within 30 minutes).

scripts/test starts three workers on CI's two cores: the suite mostly waits on servers
(two workers left the CPU 60 % idle), so each group has a worker and the quick tests go
to whichever worker runs out of work first.

At the end the controller prints each worker's share: its tests, the seconds they took,
when its last one ended, and its longest modules. The latest of their ends is the run's
length, so those lines say which tests to move or cut when CI nears its 30 minutes
(issue 34).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from contract.settings import CATALOG

HOST_MARKS = ("netns", "nspawn", "slurm")  # own something of the whole host
HEAVY_MARKS = ("slow", *HOST_MARKS)
# Slow, but with no deadline to miss and nothing of the host's to own: beside the others.
NO_DEADLINE = "no_deadline"
HEAVY_GROUP = "heavy"
COMMANDS_GROUP = "commands"
COMMANDS_TESTS = "tests/maccli/"  # the `mac` command's tests, by their node ids
# Slow tests of the command kept in `heavy`: the supervisor's 15 s backoff is measured
# against the clock, too fine a promise to share the cores with another deadline stream.
SHARED_CORES_TOO_COARSE = frozenset({"tests/maccli/test_supervision.py"})
DOCKER_MARK = DOCKER_GROUP = "docker"
MODULES_SHOWN = 8  # each worker's longest test modules, in the summary
# CFS weight 110 against a heavy test's 1024: two quick workers take the idle time and yield
# the rest, never stalled.
QUICK_NICENESS = 10


def worker_number(environ: Mapping[str, str] = os.environ) -> int | None:
    """0 for gw0, 1 for gw1...; None outside xdist (one process runs everything)."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else None


def _own_redis_database(url: str, number: int) -> str:
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(base + number) % 16}"))


def defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """The tests' Redis database and data folder where nothing gave them (an empty value
    counts as none): never a master's database 0 or the checkout's var/."""
    if not environ.get("MAC_REDIS_URL"):
        test_redis = environ.get("MAC_TEST_REDIS_URL") or CATALOG["MAC_TEST_REDIS_URL"].default
        environ["MAC_REDIS_URL"] = test_redis
    if not environ.get("MAC_DATA_DIR"):
        folder = tempfile.mkdtemp(prefix="mac-test-data.")
        environ["MAC_DATA_DIR"] = folder
        atexit.register(_remove, folder, os.getpid())


def _remove(folder: str, owner: int) -> None:
    """The data folder made by `defaults`, by the process that made it (not by a child
    forked from it, whose exit runs these handlers too)."""
    if os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)


def per_worker(environ: MutableMapping[str, str] = os.environ) -> None:
    """This xdist worker's own Redis database and data folder (nothing outside xdist)."""
    number = worker_number(environ)
    if number is None:
        return
    if url := environ.get("MAC_REDIS_URL"):
        environ["MAC_REDIS_URL"] = _own_redis_database(url, number)
    if data := environ.get("MAC_DATA_DIR"):
        own = Path(data) / f"gw{number}"
        own.mkdir(parents=True, exist_ok=True)
        environ["MAC_DATA_DIR"] = str(own)


def _apply(environ: MutableMapping[str, str] = os.environ) -> None:
    defaults(environ)
    per_worker(environ)


_apply()


def pytest_configure(config: pytest.Config) -> None:
    # Known even where xdist is off (-p no:xdist), for --strict-markers.
    config.addinivalue_line("markers", "xdist_group(name): run with its group on one worker")
    config.addinivalue_line(
        "markers", f"{NO_DEADLINE}: slow, but may run beside the heavy tests (no deadline)"
    )
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.pluginmanager.register(WorkerShares(), "mac-worker-shares")


def is_heavy(item: pytest.Item) -> bool:
    if item.get_closest_marker(NO_DEADLINE) or item.get_closest_marker(DOCKER_MARK):
        return False
    return any(item.get_closest_marker(mark) for mark in HEAVY_MARKS)


def owns_the_host(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(mark) for mark in HOST_MARKS)


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def group_of(item: pytest.Item, host_modules: frozenset[str] = frozenset()) -> str | None:
    """The xdist group that keeps `item` on one worker with its kind; None: anywhere.
    `host_modules`: the modules with a test that owns the host, kept whole in `heavy`
    (their fixtures are shared by module)."""
    if item.get_closest_marker(DOCKER_MARK):
        return DOCKER_GROUP
    if not is_heavy(item):
        return None
    module = module_of(item)
    if (
        module.startswith(COMMANDS_TESTS)
        and module not in host_modules
        and module not in SHARED_CORES_TOO_COARSE
    ):
        return COMMANDS_GROUP
    return HEAVY_GROUP


# First: xdist's own hook (on each worker) turns the mark into the `@heavy` suffix of the
# node ids that `--dist loadgroup` schedules by; a mark added after it is ignored.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    host_modules = frozenset(module_of(item) for item in items if owns_the_host(item))
    for item in items:
        if group := group_of(item, host_modules):
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Only root may raise a priority again (a worker runs both kinds, in any order).
    if worker_number() is None or os.geteuid() != 0:
        return
    os.setpriority(os.PRIO_PROCESS, 0, 0 if group_of(item) else QUICK_NICENESS)


class WorkerShares:
    """The controller's view of each worker: tests run, seconds busy, when it last ended."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.tests: Counter[str] = Counter()
        self.busy: defaultdict[str, float] = defaultdict(float)
        self.ended: dict[str, float] = {}
        self.modules: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # set by xdist on the controller's copies
        if node is None:
            return
        worker = node.gateway.id
        self.busy[worker] += report.duration
        self.modules[worker][report.nodeid.split("::")[0]] += report.duration
        if report.when == "teardown":
            self.tests[worker] += 1
            self.ended[worker] = time.monotonic() - self.began

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.tests:
            return
        terminalreporter.write_sep("-", "xdist workers (the latest end is the run's length)")
        for worker in sorted(self.tests):
            terminalreporter.write_line(
                f"{worker}: {self.tests[worker]:,} tests, {self.busy[worker]:,.0f} s in tests, "
                f"last ended {self.ended[worker]:,.0f} s after the start"
            )
            # Where the time went: the modules to move or cut first.
            heaviest = self.modules[worker].most_common(MODULES_SHOWN)
            terminalreporter.write_line(
                "    " + ", ".join(f"{module} {seconds:,.0f} s" for module, seconds in heaviest)
            )
