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
PACKAGES = (
    "contract", "node", "maccli", "exporters", "macweb", "healthcheck", "scraping", "scheduler",
    "alerting", "inventory", "testkit",
)  # fmt: skip

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


def _lint_with(tmp_path: Path, module: str, line: str) -> str:
    """lint-imports over a copy of the tree where ``module`` (a path) also has ``line``."""
    root = _copy_tree(tmp_path)
    with (root / module).open("a") as handle:
        handle.write(f"\n{line}  # noqa\n")
    done = _lint(root)
    assert done.returncode != 0, done.stdout
    return done.stdout


def test_an_agent_module_importing_the_inventory_breaks_the_layers(tmp_path):
    out = _lint_with(tmp_path, "maccli/output.py", "from inventory.models import Node")
    assert "maccli is not allowed to import inventory" in out
    assert "maccli.output -> inventory.models" in out


def test_runtime_code_importing_test_tooling_breaks_the_layers(tmp_path):
    out = _lint_with(tmp_path, "healthcheck/sweep.py", "import testkit.simfleet")
    assert "healthcheck is not allowed to import testkit" in out


def test_the_mac_command_imports_the_exporters_only_to_launch_them(tmp_path):
    """maccli reads the host through node/; an exporter module anywhere else breaks it."""
    out = _lint_with(tmp_path, "maccli/doctor.py", "from exporters.nic import RdmaSource")
    assert "maccli.doctor -> exporters.nic" in out


def test_the_exporters_never_import_the_mac_command(tmp_path):
    out = _lint_with(tmp_path, "exporters/nic.py", "import maccli.output")
    assert "exporters.nic -> maccli.output" in out


def test_the_scheduler_sits_under_the_sweep(tmp_path):
    """healthcheck calls the scheduler (drains), never the other way round."""
    out = _lint_with(tmp_path, "scheduler/apps.py", "import healthcheck.sweep")
    assert "scheduler is not allowed to import healthcheck" in out


def test_the_metrics_plane_sits_under_the_sweep_beside_the_scheduler(tmp_path):
    """healthcheck writes the targets through scraping; scraping and the scheduler stay apart."""
    out = _lint_with(tmp_path, "scraping/targets.py", "import healthcheck.sweep")
    assert "scraping is not allowed to import healthcheck" in out
    out = _lint_with(tmp_path / "beside", "scraping/targets.py", "import scheduler.drain")
    assert "scraping is not allowed to import scheduler" in out


def test_the_slurm_client_needs_no_django(tmp_path):
    out = _lint_with(tmp_path, "scheduler/slurm/client.py", "import django.conf")
    assert "scheduler.slurm is not allowed to import django" in out
    assert "scheduler.slurm.client -> django" in out


def test_layout_figures_are_counted_not_typed():
    """docs/layout.md's packages, modules and arrows are what the import graph says now."""
    from testkit import layers

    assert not layers.stale(), "run .venv/bin/python -m testkit.layers --write"


def test_an_import_up_a_layer_is_counted(tmp_path):
    root = _copy_tree(tmp_path)
    with (root / "scheduler/apps.py").open("a") as handle:
        handle.write("\nimport healthcheck.sweep  # noqa\n")
    done = subprocess.run(
        [sys.executable, "-m", "testkit.layers"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "arrows going up a layer: **1** (scheduler → healthcheck)" in done.stdout
    assert "cycles between packages: **1** (healthcheck ↔ scheduler)" in done.stdout
