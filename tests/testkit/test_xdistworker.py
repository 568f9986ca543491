"""The heavy tests share a worker per group: run a small suite the way scripts/test runs
the real one and see where each test went. A pytest or xdist release that stops honouring
the group (pytest-dev/pytest-xdist#1386) fails here, not as races in the Docker tests.

And a plain `pytest` gets the tests' own Redis database and data folder, never a
master's (finding 1 of the tests' review)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from testkit.xdistworker import defaults, per_worker

REPO = Path(__file__).resolve().parents[2]
# "[gw1] [ 50%] PASSED test_suite.py::test_slow[0]@heavy": the worker, the test, its group.
# "gw0: 13 tests, 0 s in tests, last ended 1 s after the start"
SHARE = re.compile(r"^(gw\d): (\d+) tests, [\d,]+ s in tests, last ended [\d,]+ s after", re.M)
PASSED = re.compile(
    r"\[(gw\d)\] \[\s*\d+%\] PASSED (?:tests/maccli/)?test_\w+\.py::(\w+)(?:\[\d+\])?(@\w+)?"
)

SUITE = """
import pytest

@pytest.mark.slow
@pytest.mark.parametrize("i", range(6))
def test_slow(i):
    pass

@pytest.mark.docker
@pytest.mark.parametrize("i", range(6))
def test_docker(i):
    pass

@pytest.mark.parametrize("i", range(12))
def test_quick(i):
    pass

@pytest.mark.slow
@pytest.mark.no_deadline
def test_long_without_deadline():
    pass
"""
# The `mac` command's slow tests: a group of their own, but for a module that owns the host
# (kept whole with the host's tests) and the supervisor's backoff (too fine to share).
COMMANDS = """
import pytest

@pytest.mark.slow
@pytest.mark.parametrize("i", range(4))
def test_command(i):
    pass
"""
HOST_WIDE = """
import pytest

@pytest.mark.netns
def test_in_a_namespace():
    pass

@pytest.mark.slow
def test_beside_the_namespace():
    pass
"""
SUPERVISION = """
import pytest

@pytest.mark.slow
def test_backoff():
    pass
"""


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple[str, str, str]], str]:
    """(worker, test, "@group" or "") for each test the suite ran, and pytest's output."""
    tmp_path = tmp_path_factory.mktemp("suite")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    slow: s\n    docker: d\n    netns: n\n"
    )
    (tmp_path / "test_suite.py").write_text(SUITE)
    commands = tmp_path / "tests" / "maccli"
    commands.mkdir(parents=True)
    (commands / "test_commands.py").write_text(COMMANDS)
    (commands / "test_hostwide.py").write_text(HOST_WIDE)
    (commands / "test_supervision.py").write_text(SUPERVISION)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "testkit.xdistworker", "-p", "no:django",
         "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup", "-v", "--import-mode",
         "importlib", "test_suite.py", "tests"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return PASSED.findall(ran.stdout), ran.stdout


def test_each_heavy_group_runs_on_a_worker_of_its_own_and_the_quick_ones_beside_them(
    suite_run,
) -> None:
    ran, _ = suite_run
    workers: dict[str, set[str]] = defaultdict(set)
    groups: dict[str, set[str]] = defaultdict(set)
    for worker, test, group in ran:
        workers[test].add(worker)
        groups[test].add(group)
    assert groups == {
        "test_slow": {"@heavy"},
        "test_in_a_namespace": {"@heavy"},
        "test_beside_the_namespace": {"@heavy"},  # its module owns the host: kept whole
        "test_backoff": {"@heavy"},
        "test_command": {"@commands"},
        "test_docker": {"@docker"},
        "test_quick": {""},
        "test_long_without_deadline": {""},
    }
    heavy = workers["test_slow"] | workers["test_in_a_namespace"] | workers["test_backoff"]
    assert len(heavy) == 1, f"heavy tests ran on {sorted(heavy)}"
    # Each group together, on a worker of its own (the longest group's time is the run's).
    assert len(workers["test_command"]) == 1, sorted(workers["test_command"])
    assert len(workers["test_docker"]) == 1, sorted(workers["test_docker"])
    assert len(heavy | workers["test_command"] | workers["test_docker"]) == 3
    assert len(ran) == 32


def test_the_run_ends_with_each_worker_s_share(suite_run) -> None:
    ran, output = suite_run
    counted = {worker: 0 for worker, _, _ in ran}
    for worker, _, _ in ran:
        counted[worker] += 1
    shares = dict(SHARE.findall(output))
    assert {worker: int(tests) for worker, tests in shares.items()} == counted, output
    # and under each, the modules its time went to
    assert output.count("\n    test_suite.py ") + output.count("\n    tests/") == len(counted)


def test_a_run_given_no_redis_or_data_folder_gets_the_tests_own_not_a_master_s():
    environ: dict[str, str] = {"MAC_REDIS_URL": "", "PATH": "/usr/bin"}
    defaults(environ)
    assert environ["MAC_REDIS_URL"] == "redis://127.0.0.1:6379/9"  # scripts/test's, not db 0
    made = Path(environ["MAC_DATA_DIR"])
    try:
        assert made.is_dir() and not any(made.iterdir())
        assert not made.is_relative_to(REPO)  # never the checkout's var/
        again: dict[str, str] = {"MAC_TEST_REDIS_URL": "redis://127.0.0.1:6379/11"}
        defaults(again)
        assert again["MAC_REDIS_URL"] == "redis://127.0.0.1:6379/11"
        assert again["MAC_DATA_DIR"] != environ["MAC_DATA_DIR"]  # a fresh one each time
        Path(again["MAC_DATA_DIR"]).rmdir()
    finally:
        made.rmdir()


def test_given_values_are_kept_and_then_split_per_worker(tmp_path):
    given = {
        "MAC_REDIS_URL": "redis://127.0.0.1:6379/4",
        "MAC_TEST_REDIS_URL": "redis://127.0.0.1:6379/11",
        "MAC_DATA_DIR": str(tmp_path),
    }
    environ = dict(given)
    defaults(environ)
    assert environ == given
    per_worker(environ)  # outside xdist: nothing to split
    assert environ == given
    environ["PYTEST_XDIST_WORKER"] = "gw1"
    per_worker(environ)
    assert environ["MAC_REDIS_URL"] == "redis://127.0.0.1:6379/5"
    assert environ["MAC_DATA_DIR"] == str(tmp_path / "gw1") and (tmp_path / "gw1").is_dir()


def test_loading_the_plugin_applies_the_defaults_and_removes_its_folder_at_exit():
    """As `-p testkit.xdistworker` loads it: before anything reads the settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAC_", "PYTEST_XDIST"))}
    env["PYTHONPATH"] = str(REPO)
    shown = subprocess.run(
        [sys.executable, "-c",
         "import os, testkit.xdistworker\n"
         "print(os.environ['MAC_REDIS_URL'], os.environ['MAC_DATA_DIR'], "
         "os.path.isdir(os.environ['MAC_DATA_DIR']))"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    url, folder, existed = shown
    assert url == "redis://127.0.0.1:6379/9"
    assert existed == "True" and not Path(folder).is_relative_to(REPO)
    assert not Path(folder).exists()  # removed when the run ended
