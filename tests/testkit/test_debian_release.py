"""Another Debian release's packages unpacked beside the host's (testkit.debian_release):
real apt against Debian's mirror, with folders of its own."""

from __future__ import annotations

import json
import shutil

import pytest

from testkit.debian_release import MANIFEST, fetch, mac_settings, main, program_version, upstream

needs_apt = pytest.mark.skipif(
    not (shutil.which("apt-get") and shutil.which("dpkg-deb")), reason="not a Debian host"
)


def test_the_upstream_version_is_read_from_a_debian_one():
    assert upstream("1.112.0+ds1-2") == "1.112.0"
    assert upstream("2.42.0+ds-5+deb12u1") == "2.42.0"
    assert upstream("1:2.3-1") == "2.3"


def test_a_program_nobody_packaged_has_no_version(tmp_path):
    loose = tmp_path / "vmagent"
    loose.write_text("#!/bin/sh\n")
    assert program_version(str(loose)) == ""


@needs_apt
def test_a_host_program_is_named_by_its_package():
    said = program_version(shutil.which("dpkg-deb"))
    assert said.startswith("dpkg ") and said.endswith("(this host's)"), said


@needs_apt
def test_a_package_of_another_release_is_unpacked_with_its_version(tmp_path, capsys):
    # `hello`: a few kB, in every release (trixie's needs a newer glibc: not run here).
    root = fetch("trixie", ["hello"], tmp_path)
    hello = root / "usr" / "bin" / "hello"
    assert hello.is_file() and hello.stat().st_size > 1000
    said = program_version(str(hello))
    assert said.startswith("hello ") and said.endswith("(Debian trixie)"), said
    manifest = json.loads((root / MANIFEST).read_text())
    assert manifest["/usr/bin/hello"]["package"] == "hello"
    assert "downloading hello from Debian trixie" in capsys.readouterr().out
    # Asked again: nothing is fetched (the manifest names it).
    assert fetch("trixie", ["hello"], tmp_path) == root
    assert "downloading" not in capsys.readouterr().out


@needs_apt
def test_a_package_that_does_not_exist_is_named_and_nothing_is_half_written(tmp_path, capsys):
    assert main(["trixie", "no-such-package-mac", "--cache", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: apt-get") and "no-such-package-mac" in error, error
    assert not (tmp_path / "trixie" / "root" / MANIFEST).exists()


def test_mac_is_pointed_at_the_engine_programs_of_the_packages_asked(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    entry = {"version": "1.112.0+ds1-2", "release": "trixie"}
    (root / MANIFEST).write_text(json.dumps({
        "/usr/bin/vmagent": {"package": "victoria-metrics", **entry},
        "/usr/bin/vmctl": {"package": "victoria-metrics", **entry},  # no setting names it
        "/usr/bin/prometheus": {"package": "prometheus", **entry},
    }))  # fmt: skip
    assert mac_settings(root, ["victoria-metrics"]) == {
        "MAC_VMAGENT_BIN": str(root / "usr/bin/vmagent")
    }
