"""Captures kept outside the repository: found in a captures folder, checked against MANIFEST.md.

Some public captures come from repository snapshots that the project may read but
never commit (tests/fixtures/captured/MANIFEST.md says which and where from). They
live in a folder outside the repository: ``MAC_CAPTURES_DIR``, by default the
steering repository's ``shared/captures`` beside this checkout. A test that needs
one asks :func:`capture` for it by its path in that folder:

* a file that is not there skips the test, naming the file and where it was looked for;
  under CI (``CI=true``, as CI services set it) it fails the test instead, naming the
  path: there the captures are part of the run, and a skip would hide that they are gone;
* a file whose sha256 is not the manifest's fails the test: it is not the capture the
  test's hand-worked values came from.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "tests" / "fixtures" / "captured" / "MANIFEST.md"
# A manifest row: | `owner/repo/path` | `sha256` | ... ; the header and notes are not rows.
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`([0-9a-f]{64})`\s*\|")


def captures_dir() -> Path:
    """Where the captures are looked for: $MAC_CAPTURES_DIR, else <repo>/../shared/captures."""
    configured = os.environ.get("MAC_CAPTURES_DIR", "").strip()
    return Path(configured) if configured else ROOT.parent / "shared" / "captures"


def in_ci() -> bool:
    """Whether this run is CI's (CI=true, as GitHub Actions, GitLab CI and others set it)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


@cache
def manifest() -> dict[str, str]:
    """Path under the captures folder -> the sha256 the manifest gives it."""
    found = {}
    for line in MANIFEST.read_text().splitlines():
        if match := _ROW.match(line):
            found[match.group(1)] = match.group(2)
    return found


@cache
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def capture(relative: str) -> Path:
    """The capture at ``relative`` in the captures folder, once its sha256 is the manifest's."""
    want = manifest().get(relative)
    if want is None:
        raise KeyError(f"{relative} is not listed in {MANIFEST.relative_to(ROOT)}")
    path = captures_dir() / relative
    if not path.is_file():
        where = f"(set MAC_CAPTURES_DIR; {MANIFEST.relative_to(ROOT)} says where to get it)"
        if in_ci():
            pytest.fail(f"CI=true: capture {path} is missing {where}", pytrace=False)
        pytest.skip(f"capture {relative} is not in {captures_dir()} {where}")
    got = _sha256(path.resolve())
    if got != want:
        pytest.fail(
            f"{path} has sha256 {got}, {MANIFEST.relative_to(ROOT)} says {want}: "
            "not the capture these tests were worked out from",
            pytrace=False,
        )
    return path
