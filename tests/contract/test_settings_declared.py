"""Every setting the code reads is declared in contract.settings, and every declared one is
read somewhere: a grep of the tree, so that a new `MAC_*` cannot slip past the catalog
(and its docs) and a removed one cannot linger in them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from contract.settings import CATALOG

REPO = Path(__file__).resolve().parents[2]
# Where MAC's deployed code lives, with what it ships beside it.
RUNTIME_TREES = (
    "contract",
    "node",
    "maccli",
    "exporters",
    "macweb",
    "healthcheck",
    "scraping",
    "alerting",
    "inventory",
    "scheduler",
    "docker",
    "scripts",
)
NAME = re.compile(r"MAC_[A-Z0-9_]+")
# Names that look like settings and are not, each with the reason.
NOT_SETTINGS = {
    "MAC_REASON_PREFIX": "a constant of scheduler.slurm: how MAC's drain reasons begin",
    "MAC_VM_": "the prefix of VictoriaMetrics' own flags given in the environment "
    "(-envflag.prefix, maccli.master.scaleout): the store's keys, which mac writes",
}
# The other programs' variables that MAC's code reads as they define them.
OTHER_PROGRAMS = {
    "DOCKER_HOST": "Docker's engine address",
    "NO_COLOR": "no-color.org",
    "PYTHONPATH": "Python's",
    "SUDO_USER": "sudo's: who ran it",
    "XDG_CACHE_HOME": "the XDG base directories",
}
# How the code reads a setting by its literal name.
READ = re.compile(
    r"(?:environ\.get|getenv|cfg\.get|\.lookup|\.value|setting|text)\(\s*\"([A-Z][A-Z0-9_]+)\""
    r"|environ\[\"([A-Z][A-Z0-9_]+)\"\]"
)


def _tracked(*trees: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--", *trees], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPO / name for name in listed if (REPO / name).is_file()]


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        return ""  # images and other binary files


def _named_in(paths: list[Path]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in paths:
        for name in set(NAME.findall(_text(path))):
            found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def _undeclared(found: dict[str, set[str]]) -> dict[str, list[str]]:
    return {
        name: sorted(where)[:3]
        for name, where in found.items()
        if name not in CATALOG
        and name not in NOT_SETTINGS
        # "MAC_SMTP_*" in prose: a family, which must hold a declared setting.
        and not (name.endswith("_") and any(key.startswith(name) for key in CATALOG))
    }


def test_every_mac_name_in_the_runtime_tree_is_declared():
    found = _named_in(_tracked(*RUNTIME_TREES))
    assert len(found) > 150, "the grep found too little: is it looking at the tree?"
    undeclared = _undeclared(found)
    assert not undeclared, (
        "read but not declared in contract/settings/ (add a Setting, then run "
        f"python -m contract.settings.tables --write): {undeclared}"
    )


def test_every_other_name_the_code_reads_as_a_setting_is_declared():
    read: dict[str, set[str]] = {}
    for path in _tracked(*RUNTIME_TREES):
        if path.suffix == ".py":
            for match in READ.finditer(_text(path)):
                name = match[1] or match[2]
                read.setdefault(name, set()).add(str(path.relative_to(REPO)))
    assert {"MASTER_IP", "NODE_NAME", "DATABASE_URL", "SLURM_CONF"} <= set(read)
    stray = {
        name: sorted(where)
        for name, where in read.items()
        if name not in CATALOG and name not in OTHER_PROGRAMS
    }
    assert not stray, f"read as settings but not declared in contract/settings/: {stray}"


def test_every_declared_setting_is_read_somewhere():
    """Outside its declaration and the docs: in code, Compose files, scripts or tests."""
    code = [
        path
        for path in _tracked(".")
        if not str(path.relative_to(REPO)).startswith(("contract/settings/", "docs/"))
        and path.suffix != ".md"
    ]
    blob = "\n".join(_text(path) for path in code)
    unread = [
        name
        for name in CATALOG
        if not re.search(rf"(?<![A-Z0-9_]){re.escape(name)}(?![A-Z0-9_])", blob)
    ]
    assert not unread, f"declared in contract/settings/ but read nowhere: {unread}"


def test_a_name_nobody_declared_is_caught_and_a_family_needs_a_member(tmp_path):
    stray = tmp_path / "stray.py"
    stray.write_text('cfg.get("MAC_NOT_DECLARED_ANYWHERE")  # and MAC_SMTP_* and MAC_NOPE_*\n')
    found = {name: {"stray.py"} for name in NAME.findall(stray.read_text())}
    assert set(_undeclared(found)) == {"MAC_NOT_DECLARED_ANYWHERE", "MAC_NOPE_"}


def test_the_exceptions_are_not_settings_after_all():
    assert not set(NOT_SETTINGS) & set(CATALOG)
    assert not set(OTHER_PROGRAMS) & set(CATALOG)
