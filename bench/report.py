"""Shared helpers for the benchmarks: statistics, free ports, their docs/benchmarks.md section.

Each benchmark owns one section between markers, so several benchmarks can update
the same file without overwriting each other's results.
"""

from __future__ import annotations

import platform
import re
import statistics
from datetime import UTC, datetime
from pathlib import Path

import psutil

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = (
    "# Benchmarks\n\n"
    "Every figure below was measured by the script named in its section, on real servers\n"
    "and sockets, several runs, with a baseline measured in the same run. Rerun with\n"
    "`.venv/bin/python -m bench.<name>`.\n"
)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile; pct in 0..100."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def verdict(target: str, figure: str, value: float, limit: float, unit: str = "") -> str:
    """One target judged on the figure it names: `value` (that figure) against `limit`.

    `figure` says which statistic it is ("the p99 of 3 sweeps", "the worst of 6 trials"),
    so that a target on a p99 or a worst case is never called met on a median.
    """
    shown = f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"
    met = "met" if value <= limit else "MISSED"
    judged = f"{figure}: {shown}{unit}, at most {limit:g}{unit}"
    return f"- Target: {target}. Judged on {judged}: **{met}**."


def machine_line() -> str:
    mem_gib = psutil.virtual_memory().total / 2**30
    return (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{psutil.cpu_count()} CPUs, {mem_gib:.0f} GiB, {platform.system()} {platform.release()}"
    )


MARKER = re.compile(r"^<!-- (/?)bench:([\w.-]+) -->$", re.M)


def check_markers(text: str) -> None:
    """Every section's start marker closed by its own end marker before the next starts.

    A section moved by hand without its markers would otherwise be swallowed by the
    next write of the section whose markers now surround it."""
    open_name = None
    seen: set[str] = set()
    for match in MARKER.finditer(text):
        closing, name = match.group(1) == "/", match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if not closing:
            if open_name is not None:
                raise ValueError(f"line {line}: section {name!r} starts inside {open_name!r}")
            if name in seen:
                raise ValueError(f"line {line}: section {name!r} appears twice")
            open_name = name
            seen.add(name)
        elif name != open_name:
            raise ValueError(f"line {line}: end of {name!r} without its start")
        else:
            open_name = None
    if open_name is not None:
        raise ValueError(f"section {open_name!r} is never closed")


def update_section(name: str, title: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace (or append) the section `name` of docs/benchmarks.md with `body`."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"<!-- bench:{name} -->\n## {title}\n\n"
        f"_Measured {stamp} on {machine_line()}._\n\n{body.strip()}\n<!-- /bench:{name} -->\n"
    )
    text = path.read_text() if path.exists() else HEADER
    check_markers(text)
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->\n?", re.S
    )
    text = (
        pattern.sub(section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
