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


# --- The mirror debootstrap gets when MAC_DEBIAN_MIRROR is unset: apt's own, read from a
# fake /etc/apt that APT_CONFIG (apt's own override of Dir::Etc) points apt-config at.

RECORDING_DEBOOTSTRAP = """#!/bin/sh
# Records its arguments (the mirror is the last); makes a minimal tree, or fails when asked.
printf '%s\\n' "$@" > "{args}"
[ -z "$FAKE_DEBOOTSTRAP_FAILS" ] || {{ echo "E: Failed getting release file" >&2; exit 1; }}
target=$(eval echo "\\${{$(($# - 1))}}")
mkdir -p "$target/usr/bin" && echo python3 > "$target/usr/bin/python3"
"""

DEBIAN_SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def _mirror_run(
    tmp_path: Path, sources: dict[str, str], **env: str
) -> tuple[subprocess.CompletedProcess, str | None]:
    """scripts/docker-base --rootfs-only on a fake /etc/apt holding `sources` (paths under
    etc/apt); what it printed, and the mirror debootstrap got (None: not called)."""
    etc = tmp_path / "etc" / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "apt.conf.d").mkdir()
    for name, text in sources.items():
        (etc / name).write_text(text)
    apt_conf = tmp_path / "apt.conf"
    apt_conf.write_text(f'Dir::Etc "{etc}";\n')
    bin_dir, args = tmp_path / "bin", tmp_path / "debootstrap.args"
    bin_dir.mkdir()
    fake = bin_dir / "debootstrap"
    fake.write_text(RECORDING_DEBOOTSTRAP.format(args=args))
    fake.chmod(0o755)
    run_env = {
        **{k: v for k, v in os.environ.items() if k != "MAC_DEBIAN_MIRROR"},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "MAC_DOCKER_CACHE": str(tmp_path / "cache"),
        "APT_CONFIG": str(apt_conf),
        **env,
    }
    done = subprocess.run(
        [str(REPO / "scripts" / "docker-base"), "--rootfs-only"],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, (args.read_text().split()[-1] if args.exists() else None)


@pytest.mark.parametrize(
    ("sources", "mirror"),
    [
        pytest.param(
            {
                "sources.list": "# deb http://old.example/debian bookworm main\n"
                "deb [arch=amd64 signed-by=/usr/share/keyrings/debian.gpg] "
                "http://ftp.example.org/debian/ bookworm main contrib\n"
            },
            "http://ftp.example.org/debian/",
            id="one-line-with-options",
        ),
        pytest.param(
            {
                "sources.list": "deb [ arch=amd64 trusted=yes ] file:/srv/mirror/debian "
                "bookworm main\n"
            },
            "file:/srv/mirror/debian",
            id="options-with-spaces-and-a-local-mirror",
        ),
        pytest.param(
            {"sources.list.d/debian.sources": DEBIAN_SOURCES},
            "http://deb.debian.org/debian",
            id="deb822-with-a-comment",
        ),
        pytest.param(
            {
                "sources.list.d/debian.sources": "Types: deb\n"
                "URIs: mirror+file:///etc/apt/mirrors/debian.list\n"
                "  https://mirror.example.net/debian\n"
                "Suites: bookworm\nComponents: main\n"
            },
            "https://mirror.example.net/debian",
            id="deb822-second-uri-after-a-mirror-list",
        ),
        pytest.param(
            {
                "sources.list": "deb http://security.debian.org/debian-security "
                "bookworm-security main\n",
                "sources.list.d/a-docker.sources": "Types: deb\n"
                "URIs: https://download.docker.com/linux/debian\n"
                "Suites: bookworm\nComponents: stable\n",
                "sources.list.d/b-off.sources": "Enabled: no\nTypes: deb\n"
                "URIs: http://disabled.example/debian\nSuites: bookworm\nComponents: main\n",
                "sources.list.d/c-src.sources": "Types: deb-src\n"
                "URIs: http://src.example/debian\nSuites: bookworm\nComponents: main\n",
                "sources.list.d/d-debian.sources": DEBIAN_SOURCES.replace(
                    "deb.debian.org", "mirror.example.org"
                ),
            },
            "http://mirror.example.org/debian",
            id="other-vendors-security-disabled-and-sources-skipped",
        ),
    ],
)
def test_the_mirror_is_apts_first_debian_archive_debootstrap_can_fetch_from(
    tmp_path: Path, sources: dict[str, str], mirror: str
) -> None:
    done, used = _mirror_run(tmp_path, sources)
    assert done.returncode == 0, done.stderr
    assert used == mirror, done.stderr
    assert "MAC_DEBIAN_MIRROR" not in done.stderr  # nothing to explain


@pytest.mark.parametrize(
    "sources",
    [
        pytest.param(
            {
                "sources.list.d/debian.sources": "Types: deb\n"
                "URIs: mirror+file:///etc/apt/mirrors/debian.list\n"
                "Suites: bookworm bookworm-updates\nComponents: main\n"
            },
            id="mirror-list",
        ),
        pytest.param(
            {
                "sources.list": "deb cdrom:[Debian GNU/Linux 12.5.0 _Bookworm_ - Official amd64 "
                "DVD Binary-1 with firmware 20240210-11:28]/ bookworm contrib main\n"
            },
            id="cdrom",
        ),
    ],
)
def test_an_apt_mirror_debootstrap_cannot_use_falls_back_to_deb_debian_org(
    tmp_path: Path, sources: dict[str, str]
) -> None:
    done, used = _mirror_run(tmp_path, sources)
    assert done.returncode == 0, done.stderr
    assert used == "http://deb.debian.org/debian"
    assert "is not one debootstrap can use" in done.stderr
    assert "MAC_DEBIAN_MIRROR=URL picks another" in done.stderr


def test_no_apt_sources_at_all_gives_deb_debian_org(tmp_path: Path) -> None:
    done, used = _mirror_run(tmp_path, {})
    assert done.returncode == 0, done.stderr
    assert used == "http://deb.debian.org/debian"


def test_mac_debian_mirror_wins_and_a_bad_one_is_named(tmp_path: Path) -> None:
    sources = {"sources.list.d/debian.sources": DEBIAN_SOURCES}
    done, used = _mirror_run(
        tmp_path / "good", sources, MAC_DEBIAN_MIRROR="http://given.example/debian"
    )
    assert done.returncode == 0, done.stderr
    assert used == "http://given.example/debian"

    done, used = _mirror_run(
        tmp_path / "bad", sources, MAC_DEBIAN_MIRROR="mirror+file:///etc/apt/mirrors/debian.list"
    )
    assert done.returncode != 0
    assert used is None, "debootstrap ran on a mirror it cannot use"
    assert "MAC_DEBIAN_MIRROR=mirror+file:///etc/apt/mirrors/debian.list" in done.stderr
    assert "http://, https:// or file:/" in done.stderr


def test_a_failed_debootstrap_names_the_mirror_and_how_to_pick_another(tmp_path: Path) -> None:
    done, used = _mirror_run(
        tmp_path, {"sources.list.d/debian.sources": DEBIAN_SOURCES}, FAKE_DEBOOTSTRAP_FAILS="1"
    )
    assert done.returncode != 0
    assert used == "http://deb.debian.org/debian"
    assert "debootstrap failed from http://deb.debian.org/debian" in done.stderr
    assert "Failed getting release file" in done.stderr
    assert "MAC_DEBIAN_MIRROR=URL" in done.stderr
