"""Slurm's hostlist expressions (`node-[1-3,7]`, `rack[1-2]-gpu[01-04]`) as lists of names.

sacct and a finished job's record name their nodes only as such an expression. Written
here rather than taken from python-hostlist, which is GPL-licensed (MAC is Apache-2.0);
it follows the rules of Slurm's own hostlist.c for what the tools print: comma-separated
entries, each with zero or more bracketed ranges, numbers zero-padded to the width written.
"""

from __future__ import annotations

import itertools
import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """The text is not a hostlist expression; the message quotes it."""


def expand_hostlist(text: str) -> list[str]:
    """Every host name that `text` stands for, in the order written (duplicates kept)."""
    text = text.strip()
    if not text or text in ("(null)", "None assigned"):
        return []
    names: list[str] = []
    for entry in _split_top_level(text):
        names.extend(_expand_entry(entry, text))
    return names


def _split_top_level(text: str) -> list[str]:
    """Split on the commas that are outside brackets."""
    entries, depth, start = [], 0, 0
    for position, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {text!r}")
        elif char == "," and depth == 0:
            entries.append(text[start:position])
            start = position + 1
    if depth:
        raise HostlistError(f"unbalanced '[' in hostlist {text!r}")
    entries.append(text[start:])
    if any(not entry for entry in entries):
        raise HostlistError(f"empty entry in hostlist {text!r}")
    return entries


def _expand_entry(entry: str, whole: str) -> list[str]:
    """`rack[1-2]-gpu[01-02]` → rack1-gpu01, rack1-gpu02, rack2-gpu01, rack2-gpu02."""
    parts = re.split(r"\[([^\]]*)\]", entry)
    # parts alternates literal, bracket body, literal, ...
    choices: list[list[str]] = []
    for index, part in enumerate(parts):
        choices.append(_expand_ranges(part, whole) if index % 2 else [part])
    return ["".join(combination) for combination in itertools.product(*choices)]


def _expand_ranges(body: str, whole: str) -> list[str]:
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise HostlistError(f"bad range {item!r} in hostlist {whole!r}")
        first, last = match.group(1), match.group(2) or match.group(1)
        width = len(first) if first.startswith("0") else 0
        if int(last) < int(first):
            raise HostlistError(f"range {item!r} runs backwards in hostlist {whole!r}")
        values.extend(str(number).zfill(width) for number in range(int(first), int(last) + 1))
    return values
