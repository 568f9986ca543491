"""The import layers of pyproject.toml hold, and a forbidden import really breaks them.

scripts/test runs `lint-imports` on the tree; this test shows the contracts are not
vacuous: the same check over a copy of the tree with one agent-side module importing
a master app fails and names that import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("contract", "maccli", "exporters", "macweb", "healthcheck", "inventory", "testkit")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter not installed")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _copy_tree(dest: Path) -> Path:
    for name in (*PACKAGES, "tests", "bench"):
        shutil.copytree(
            REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "fixtures")
        )
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_tree_keeps_every_contract(tmp_path):
    done = _lint(_copy_tree(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_an_agent_module_importing_the_inventory_breaks_the_layers(tmp_path):
    root = _copy_tree(tmp_path)
    with (root / "maccli" / "output.py").open("a") as handle:
        handle.write("\nfrom inventory.models import Node  # noqa\n")
    done = _lint(root)
    assert done.returncode != 0
    assert "maccli is not allowed to import inventory" in done.stdout
    assert "maccli.output -> inventory.models" in done.stdout


def test_runtime_code_importing_test_tooling_breaks_the_layers(tmp_path):
    root = _copy_tree(tmp_path)
    with (root / "healthcheck" / "sweep.py").open("a") as handle:
        handle.write("\nimport testkit.simfleet  # noqa\n")
    done = _lint(root)
    assert done.returncode != 0
    assert "healthcheck is not allowed to import testkit" in done.stdout
