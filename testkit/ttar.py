"""Read Prometheus's ``ttar`` text archives: the format procfs and node_exporter keep sysfs in.

A ttar archive lists entries one after another: ``Directory: <path>``,
``SymlinkTo: <target>`` after a ``Path:`` line, or ``Path: <path>`` followed by
``Lines: <n>`` and n lines of content, each entry closed by ``Mode: <octal>``.
In content, ``NULLBYTE`` stands for a NUL byte and a trailing ``EOF`` marks a last
line that had no newline; a backslash in front of either keeps it literal.

The captured fixtures under tests/fixtures/captured keep verbatim slices of such
archives as Debian packages ship them, so that each can be compared line by line
with the packaged file; this module cuts those slices and turns a slice (or a whole
archive) back into a directory tree for the exporters to read.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

SEPARATOR = "# ttar - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -"
_NUL = re.compile(r"(?<!\\)NULLBYTE")
_EOF = re.compile(r"(?<!\\)EOF$")


class TtarError(ValueError):
    """The archive does not follow the format; the message names the line."""


@dataclass(frozen=True)
class Entry:
    """One archive member: a directory, a symlink or a file with its content."""

    path: str
    kind: str  # "dir", "symlink" or "file"
    content: bytes = b""
    target: str = ""
    mode: int | None = None


def _lines(text: str) -> list[str]:
    """The archive's lines: split on newlines only.

    str.splitlines() would also split on vertical tabs, form feeds and \\x1c-\\x1e,
    which binary sysfs files (an EDID, a PCI config space) hold as content.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _decode(line: str) -> tuple[bytes, bool]:
    """One content line -> (bytes, whether the original line ended with a newline)."""
    ends = not _EOF.search(line)
    if not ends:
        line = line[: -len("EOF")]
    line = _NUL.sub("\x00", line).replace("\\NULLBYTE", "NULLBYTE").replace("\\EOF", "EOF")
    return line.encode(), ends


def parse(text: str) -> list[Entry]:
    """Every entry of a ttar archive, in archive order."""
    lines = _lines(text)
    entries: list[Entry] = []
    index = 0
    path: str | None = None

    def fail(message: str) -> TtarError:
        return TtarError(f"ttar line {index + 1}: {message}")

    while index < len(lines):
        line = lines[index]
        if not line or line.startswith("#"):
            index += 1
        elif line.startswith("Directory: "):
            entries.append(Entry(line.removeprefix("Directory: "), "dir"))
            index += 1
        elif line.startswith("Path: "):
            path = line.removeprefix("Path: ")
            index += 1
        elif line.startswith("SymlinkTo: "):
            if path is None:
                raise fail("SymlinkTo without a Path")
            entries.append(Entry(path, "symlink", target=line.removeprefix("SymlinkTo: ")))
            path = None
            index += 1
        elif line.startswith("Lines: "):
            if path is None:
                raise fail("Lines without a Path")
            count = int(line.removeprefix("Lines: "))
            body = lines[index + 1 : index + 1 + count]
            if len(body) < count:
                raise fail(f"{path} announces {count} lines, the archive ends first")
            content = b""
            for raw in body:
                data, newline = _decode(raw)
                content += data + (b"\n" if newline else b"")
            entries.append(Entry(path, "file", content=content))
            path = None
            index += 1 + count
        elif line.startswith("Mode: "):
            if entries:
                entries[-1] = replace(entries[-1], mode=int(line.removeprefix("Mode: "), 8))
            index += 1
        else:
            raise fail(f"unexpected {line[:60]!r}")
    return entries


def read_archive(path: Path | str) -> str:
    """An archive's text with its line ends as written (a content \\r stays a \\r)."""
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


def extract(archive: Path | str, dest: Path | str, strip: str = "") -> Path:
    """Write the archive's entries under ``dest`` (``strip``: a leading path to drop).

    Entries outside ``strip`` are skipped; paths that would leave ``dest`` raise
    TtarError. Returns ``dest``.
    """
    dest = Path(dest)
    prefix = strip.rstrip("/") + "/" if strip else ""
    root = dest.resolve()
    for entry in parse(read_archive(archive)):
        if prefix and not (entry.path + "/").startswith(prefix):
            continue
        relative = entry.path[len(prefix) :] if prefix else entry.path
        target = dest / relative
        if root not in (target.resolve(), *target.resolve().parents):
            raise TtarError(f"{entry.path} would be written outside {dest}")
        if entry.kind == "dir":
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.kind == "symlink":
            os.symlink(entry.target, target)
        else:
            target.write_bytes(entry.content)
            if entry.mode is not None:
                target.chmod(entry.mode)  # sysfs has write-only files; keep them so
    return dest


def slice_archive(text: str, prefixes: str | Sequence[str], header: str) -> str:
    """The entries of an archive under any of ``prefixes``, verbatim, after a ``# <header>`` line.

    This is how the captured fixtures are cut from the archives that packages ship:
    every kept line is a line of the original file, in its order.
    """
    if isinstance(prefixes, str):
        prefixes = [prefixes]
    wanted = [prefix.rstrip("/") for prefix in prefixes]
    blocks, block = [], []
    for line in _lines(text):
        if line == SEPARATOR:
            blocks.append(block)
            block = []
        else:
            block.append(line)
    blocks.append(block)
    kept = []
    for lines in blocks:
        heads = [
            line.split(": ", 1)[1] for line in lines if line.startswith(("Path: ", "Directory: "))
        ]
        if heads and any(heads[0] == want or heads[0].startswith(want + "/") for want in wanted):
            kept.append("\n".join(lines) + "\n" + SEPARATOR + "\n")
    return f"# {header}\n" + "".join(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.ttar",
        description="Cut the entries under some paths out of a ttar archive read on stdin.",
    )
    parser.add_argument("prefix", nargs="+", help="keep entries at or under this path")
    parser.add_argument("--header", required=True, help="the comment line that names the source")
    args = parser.parse_args(argv)
    sys.stdout.write(slice_archive(sys.stdin.read(), args.prefix, args.header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
