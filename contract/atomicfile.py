"""Atomic file replacement: readers see the old content or the new, never a torn file.

Prometheus re-reads its file-SD targets while the sweep rewrites them, and `mac env`
rewrites env files that other processes read; both go through write_atomically.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, content: bytes, *, mode: int = 0o644) -> None:
    """Replace `path` with `content`: temporary file in the same folder, fsync, rename.

    `mode` is set before the rename, so a secret file is never readable by others,
    not even for a moment. The folder is fsynced too, so the rename itself survives
    a power cut.
    """
    path = Path(path)
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
