"""contract.atomicfile: a reader sees the old file or the new one, never a torn one."""

from __future__ import annotations

import os

import pytest

from contract import atomicfile
from contract.atomicfile import write_atomically


def test_it_replaces_the_content_and_sets_the_mode(tmp_path):
    path = tmp_path / "sub" / "targets.json"
    write_atomically(path, b"[]\n")
    write_atomically(path, b"[1]\n", mode=0o600)
    assert path.read_bytes() == b"[1]\n"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["targets.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "sys-exporter.json"
    write_atomically(path, b"[]\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomicfile.os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomically(path, b'[{"targets": []}]\n')
    assert path.read_text() == "[]\n"
    assert [p.name for p in tmp_path.iterdir()] == ["sys-exporter.json"]
