"""scripts/docker-base --rootfs-only: the Docker tests' base file system made ahead.

scripts/test starts it beside the run on a fresh machine; the Docker tests' own
`scripts/docker-base` then waits for it on the cache's lock and reuses what it made,
instead of bootstrapping Debian a second time. debootstrap itself is replaced by a
stand-in on PATH (it would download Debian): it records each call and takes a while.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="scripts/docker-base runs as root")

FAKE_DEBOOTSTRAP = """#!/bin/sh
# debootstrap --variant=minbase --include=... SUITE TARGET MIRROR: TARGET is next to last.
target=$(eval echo "\\${$(($# - 1))}")
echo called >> "{calls}"
sleep 2
mkdir -p "$target/usr/bin" && echo python3 > "$target/usr/bin/python3"
"""


def _base(cache: Path, bin_dir: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "MAC_DOCKER_CACHE": str(cache),
        "MAC_DEBIAN_MIRROR": "http://deb.example.invalid/debian",
    }
    return subprocess.Popen(
        [str(REPO / "scripts" / "docker-base"), "--rootfs-only"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_second_run_waits_for_the_first_and_reuses_its_file_system(tmp_path: Path) -> None:
    bin_dir, cache, calls = tmp_path / "bin", tmp_path / "cache", tmp_path / "calls"
    bin_dir.mkdir()
    fake = bin_dir / "debootstrap"
    fake.write_text(FAKE_DEBOOTSTRAP.replace("{calls}", str(calls)))
    fake.chmod(0o755)

    first = _base(cache, bin_dir)
    # The first holds the lock while its (slow) bootstrap runs.
    while not calls.exists() and first.poll() is None:
        time.sleep(0.05)
    second = _base(cache, bin_dir)
    first_out, _ = first.communicate(timeout=60)
    second_out, _ = second.communicate(timeout=60)

    assert first.returncode == 0, first_out
    assert second.returncode == 0, second_out
    assert calls.read_text().count("called") == 1, "Debian was bootstrapped twice"
    assert "waiting for another scripts/docker-base" in second_out
    assert "reusing" in second_out
    tarballs = list(cache.glob("mac-base-*.tar"))
    assert len(tarballs) == 1
    listed = subprocess.run(["tar", "-tf", str(tarballs[0])], capture_output=True, text=True)
    assert "./usr/bin/python3" in listed.stdout.split()
    # Nothing of a build's temporary folder is left beside the tarball.
    assert not list(cache.glob("rootfs.*"))
    # What to do next, without an engine: the image from it.
    assert "make the image from it: sudo scripts/docker-base" in first_out
