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
PASSED = re.compile(r"\[(gw\d)\] \[\s*\d+%\] PASSED test_suite\.py::(\w+)")

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
"""


def _workers_by_test(tmp_path: Path) -> dict[str, set[str]]:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: s\n    docker: d\n")
    (tmp_path / "test_suite.py").write_text(SUITE)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "testkit.xdistworker", "-p", "no:django",
         "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v", "test_suite.py"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    workers: dict[str, set[str]] = defaultdict(set)
    for worker, test in PASSED.findall(ran.stdout):
        workers[test].add(worker)
    return workers


def test_heavy_tests_run_on_one_worker_and_quick_ones_beside_them(tmp_path: Path) -> None:
    workers = _workers_by_test(tmp_path)
    heavy = workers["test_slow"] | workers["test_docker"]
    assert len(heavy) == 1, f"heavy tests ran on {sorted(heavy)}"
    assert workers["test_quick"], "the quick tests did not run"
