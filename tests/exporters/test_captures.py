"""The captures folder: a missing file skips, a wrong one fails, a listed one is found."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys

import pytest

from tests.exporters import captures


def test_the_manifest_lists_every_file_with_a_sha256():
    listed = captures.manifest()
    assert len(listed) == 17
    assert listed["ROCm/amdsmi/tests/python_unittest/README.md"] == (
        "d0eb09df51eed986ea7959444fd11c1cc6d7cafa6fe21f1311fe8b10f4e8d69e"
    )
    # <owner>/<repository>/<path in it>
    assert all(path.count("/") >= 2 for path in listed)


def test_the_folder_is_the_variable_or_shared_captures_beside_the_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv("MAC_CAPTURES_DIR", str(tmp_path))
    assert captures.captures_dir() == tmp_path
    monkeypatch.delenv("MAC_CAPTURES_DIR")
    assert captures.captures_dir() == captures.ROOT.parent / "shared" / "captures"


def test_a_missing_capture_skips_and_names_the_file(monkeypatch, tmp_path):
    monkeypatch.setenv("MAC_CAPTURES_DIR", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    wanted = "NVIDIA/dcgm-exporter/etc/default-counters.csv"
    with pytest.raises(pytest.skip.Exception, match=re.escape(f"{wanted} is not in {tmp_path}")):
        captures.capture(wanted)


def test_a_capture_with_another_sha256_fails(monkeypatch, tmp_path):
    monkeypatch.setenv("MAC_CAPTURES_DIR", str(tmp_path))
    wrong = tmp_path / "NVIDIA" / "dcgm-exporter" / "etc" / "default-counters.csv"
    wrong.parent.mkdir(parents=True)
    wrong.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, made up here.\n")
    with pytest.raises(pytest.fail.Exception, match=r"says 13d8c92c\w+: not the capture"):
        captures.capture("NVIDIA/dcgm-exporter/etc/default-counters.csv")


def test_a_capture_with_the_manifests_sha256_is_returned(monkeypatch, tmp_path):
    monkeypatch.setenv("MAC_CAPTURES_DIR", str(tmp_path))
    found = tmp_path / "owner" / "repo" / "data.txt"
    found.parent.mkdir(parents=True)
    found.write_bytes(b"port_rcv_data 1\n")
    digest = hashlib.sha256(b"port_rcv_data 1\n").hexdigest()
    monkeypatch.setattr(captures, "manifest", lambda: {"owner/repo/data.txt": digest})
    assert captures.capture("owner/repo/data.txt") == found


def test_a_path_the_manifest_does_not_list_is_a_mistake_in_the_test():
    listed_in = re.escape("not listed in tests/fixtures/captured/MANIFEST.md")
    with pytest.raises(KeyError, match=listed_in):
        captures.capture("someone/else/file.txt")


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_under_ci_a_missing_capture_fails_naming_its_path(monkeypatch, tmp_path, ci):
    monkeypatch.setenv("MAC_CAPTURES_DIR", str(tmp_path))
    monkeypatch.setenv("CI", ci)
    wanted = "NVIDIA/dcgm-exporter/etc/default-counters.csv"
    with pytest.raises(pytest.fail.Exception, match=re.escape(f"{tmp_path / wanted} is missing")):
        captures.capture(wanted)


def test_under_ci_an_empty_captures_folder_fails_the_run(tmp_path):
    """The whole run, as CI runs it: not one skip, a failure that names each path."""
    env = {**os.environ, "CI": "true", "MAC_CAPTURES_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs",
         f"--basetemp={tmp_path / 'run'}", "tests/exporters/test_captured_dcgm.py"],
        cwd=captures.ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "skipped" not in done.stdout.splitlines()[-1], done.stdout
    for name in ("default-counters.csv", "dcp-metrics-included.csv"):
        path = tmp_path / "NVIDIA" / "dcgm-exporter" / "etc" / name
        assert f"CI=true: capture {path} is missing" in done.stdout, done.stdout
