"""The heavy tests share one xdist worker: run a small suite the way scripts/test runs
the real one and see where each test went. A pytest or xdist release that stops honouring
the group (pytest-dev/pytest-xdist#1386) fails here, not as races in the Docker tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# "[gw1] [ 50%] PASSED test_suite.py::test_slow[0]@heavy": the worker, the test, its group.
PASSED = re.compile(r"\[(gw\d)\] \[\s*\d+%\] PASSED test_suite\.py::(\w+)(?:\[\d+\])?(@\w+)?")

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


def _run_suite(tmp_path: Path) -> list[tuple[str, str, str]]:
    """(worker, test, "@group" or "") for each test the suite ran."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: s\n    docker: d\n")
    (tmp_path / "test_suite.py").write_text(SUITE)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "testkit.xdistworker", "-p", "no:django",
         "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v", "test_suite.py"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return PASSED.findall(ran.stdout)


def test_heavy_tests_run_on_one_worker_and_quick_ones_beside_them(tmp_path: Path) -> None:
    ran = _run_suite(tmp_path)
    workers: dict[str, set[str]] = defaultdict(set)
    groups: dict[str, set[str]] = defaultdict(set)
    for worker, test, group in ran:
        workers[test].add(worker)
        groups[test].add(group)
    assert groups == {
        "test_slow": {"@heavy"},
        "test_docker": {"@heavy"},
        "test_quick": {""},
        "test_long_without_deadline": {""},
    }
    heavy = workers["test_slow"] | workers["test_docker"]
    assert len(heavy) == 1, f"heavy tests ran on {sorted(heavy)}"
    assert len(ran) == 25
