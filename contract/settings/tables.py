"""The docs' settings tables, generated from the declaration (contract.settings).

Each table lives between two markers in a Markdown file,
``<!-- settings:NAME -->`` and ``<!-- /settings:NAME -->``; the prose around them is the
docs' own. ``python -m contract.settings.tables --write`` rewrites every table;
``--check`` (what tests/contract/test_settings_tables.py runs) says which are stale.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from contract.settings import (
    GROUPS,
    Applies,
    Group,
    Setting,
    SetWith,
    Side,
    agent,
    development,
    launch,
    master,
    monitoring,
    scheduler,
)

ROOT = Path(__file__).resolve().parents[2]
APPLIES = {Applies.BOTH: "both", Applies.PROCESS: "process only", Applies.DOCKER: "Docker only"}
SET_WITH = {
    SetWith.ENV_FILES: "`mac env set`",
    SetWith.ENVIRONMENT: "environment only",
    SetWith.MAC: "set by `mac`",
}


def _cell(text: str) -> str:
    """Text for a table cell: no line break, `|` escaped, and `<...>` outside code shown
    as written rather than taken for HTML."""
    parts = text.replace("\n", " ").split("`")
    for index in range(0, len(parts), 2):  # the parts outside backticks
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def _link(see: str, page: str) -> str:
    """`see` (a path from the repository's root, with an optional #anchor) as a link from
    the Markdown file `page`."""
    path, _, anchor = see.partition("#")
    target = os.path.relpath(ROOT / path, (ROOT / page).parent)
    return f"[{target}]({target}{'#' + anchor if anchor else ''})"


def _default(item: Setting) -> str:
    text = item.default_text()
    if text == "unset" or " " in text or "`" in text:
        return _cell(text)
    return f"`{_cell(text)}`"


def _meaning(item: Setting, page: str) -> str:
    text = item.meaning
    if item.see:
        text += f" ({_link(item.see, page)})"
    return _cell(text)


@dataclass(frozen=True)
class Column:
    title: str
    value: Callable[[Setting, str], str]


NAME = Column("variable", lambda item, page: f"`{item.name}`")
KIND = Column("takes", lambda item, page: _cell(item.kind.describe()))
SIDES = {Side.AGENT: "agent", Side.MASTER: "master", Side.BOTH: "both", Side.DEVELOPMENT: "tools"}
SIDE = Column("read by", lambda item, page: SIDES[item.side])
DEFAULT = Column("default", lambda item, page: _default(item))
RUNTIME = Column(
    "runtime",
    lambda item, page: (
        APPLIES[item.applies] + (f" ({_cell(item.applies_note)})" if item.applies_note else "")
    ),
)
SET = Column("set with", lambda item, page: SET_WITH[item.set_with])
MEANING = Column("meaning", _meaning)


def render(settings: Iterable[Setting], columns: tuple[Column, ...], page: str) -> str:
    """A Markdown table: one row per setting."""
    lines = [
        "| " + " | ".join(column.title for column in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for item in settings:
        lines.append("| " + " | ".join(column.value(item, page) for column in columns) + " |")
    return "\n".join(lines) + "\n"


def _of(groups: Iterable[Group], keep: Callable[[Setting], bool] = lambda item: True):
    return [item for group in groups for item in group.settings if keep(item)]


def _grouped(groups: Iterable[Group], columns: tuple[Column, ...], page: str, level: str) -> str:
    """One table per group, under a heading (`level`: "##"...) of its title."""
    parts = []
    for group in groups:
        parts.append(f"{level} {group.title}\n\n" + render(group.settings, columns, page))
    return "\n".join(parts)


def _readme_table(groups: Iterable[Group]) -> Callable[[str], str]:
    return lambda page: render(
        _of(groups, lambda item: item.readme), (NAME, DEFAULT, RUNTIME, MEANING), page
    )


MASTER_GROUPS = (*launch.GROUPS, *master.GROUPS, *scheduler.GROUPS, *monitoring.GROUPS)
# Each marked table: (file, marker) -> what it holds.
TABLES: dict[tuple[str, str], Callable[[str], str]] = {
    ("README.md", "agent"): _readme_table(agent.GROUPS),
    ("README.md", "master"): _readme_table(MASTER_GROUPS),
    ("README.md", "development"): lambda page: render(
        _of(development.GROUPS), (NAME, DEFAULT, MEANING), page
    ),
    ("docs/cli.md", "node"): lambda page: _grouped(
        (*agent.GROUPS, *launch.GROUPS), (NAME, DEFAULT, RUNTIME, SET, MEANING), page, "####"
    ),
    ("docs/settings.md", "all"): lambda page: _grouped(
        GROUPS, (NAME, KIND, DEFAULT, SIDE, RUNTIME, SET, MEANING), page, "##"
    ),
}


def _markers(marker: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- settings:{marker} -->\n)(.*?)(<!-- /settings:{marker} -->)", re.DOTALL
    )


def rewritten(page: str, text: str) -> str:
    """`text` of the file `page` with each of its tables generated afresh."""
    for (file, marker), table in TABLES.items():
        if file != page:
            continue
        pattern = _markers(marker)
        if not pattern.search(text):
            raise ValueError(f"{page} has no <!-- settings:{marker} --> ... markers")
        generated = table(page)
        text = pattern.sub(lambda found, body=generated: found[1] + body + found[3], text)
    return text


def pages() -> list[str]:
    return sorted({file for file, _ in TABLES})


def stale(root: Path | None = None) -> list[str]:
    """The files (under `root`, the checkout by default) whose tables differ from what the
    declaration says now."""
    root = root or ROOT
    found = []
    for page in pages():
        text = (root / page).read_text()
        if rewritten(page, text) != text:
            found.append(page)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m contract.settings.tables",
        description="Generate the docs' settings tables from contract.settings.",
    )
    ap.add_argument("--write", action="store_true", help="rewrite the stale tables")
    args = ap.parse_args(argv)
    outdated = stale()
    if not outdated:
        print(f"The settings tables of {', '.join(pages())} are up to date.")
        return 0
    if not args.write:
        print(f"Stale settings tables in {', '.join(outdated)}.", file=sys.stderr)
        print("Regenerate them: python -m contract.settings.tables --write", file=sys.stderr)
        return 1
    for page in outdated:
        path = ROOT / page
        path.write_text(rewritten(page, path.read_text()))
        print(f"Rewrote the settings tables of {page}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
