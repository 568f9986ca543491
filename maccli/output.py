"""How `mac` talks to people: aligned tables, colour only on a terminal, spinners while waiting.

Errors always end with the next command to run; expected failures raise CliError and
main() prints them without a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


class CliError(Exception):
    """An expected failure: a message, what to run next, and the exit code.

    `rerun`: the last thing to run is the very `mac` command that failed, once the
    commands before it are done (main() adds it, as it was typed): said where the code
    that fails is shared by several commands and cannot name the one that ran.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        commands: Sequence[str] = (),
        code: int = 1,
        rerun: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.commands = list(commands)
        self.code = code
        self.rerun = rerun


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    is_tty = stream.isatty()
    # Off a terminal (pipes, logs, tests) no colour and no wrapping: lines stay greppable.
    return Console(
        file=stream,
        no_color=bool(os.environ.get("NO_COLOR")) or not is_tty,
        force_terminal=is_tty,
        width=None if is_tty else 200,
        highlight=False,
        soft_wrap=not is_tty,
    )


def out() -> Console:
    return _console(stderr=False)


def err() -> Console:
    return _console(stderr=True)


def say(message: str, style: str = "") -> None:
    out().print(Text(message, style=style))


def ok(message: str) -> None:
    say(message, "green")


def warn(message: str) -> None:
    err().print(Text(f"Warning: {message}", style="yellow"))


def print_error(error: CliError) -> None:
    console = err()
    console.print(Text(f"Error: {error.message}", style="bold red"))
    if error.hint:
        console.print(Text(error.hint))
    for command in error.commands:
        console.print(Text(f"  {command}", style="cyan"))


def table(columns: Sequence[str], rows: Sequence[Sequence[str | Text]], title: str = "") -> None:
    grid = Table(title=title or None, title_justify="left", box=None, pad_edge=False)
    for index, column in enumerate(columns):
        last = index == len(columns) - 1
        # Only the last column (free text) may wrap; names and states never shrink.
        grid.add_column(
            column,
            no_wrap=not last,
            overflow="fold" if last else "ellipsis",
            min_width=None if last else len(column) or 4,
        )
    for row in rows:
        grid.add_row(*row)
    console = out()
    if not console.is_terminal:
        # Off a terminal nothing wraps, however long a path: a line per row for greps.
        console.width = 10_000
    with console.capture() as captured:
        console.print(grid)
    # Rich pads every line to the full width; logs and greps want no trailing blanks.
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    sys.stdout.flush()


STATE_STYLES = {
    "running": "green",
    "up": "green",
    "ok": "green",
    "pass": "green",
    "online": "green",
    "stopped": "dim",
    "skip": "dim",
    "-": "dim",
    "warn": "yellow",
    "starting": "yellow",
    "unknown": "yellow",
}


def styled(value: str) -> Text:
    return Text(value, style=STATE_STYLES.get(value.lower(), "red"))


@contextlib.contextmanager
def spinner(message: str) -> Iterator[None]:
    """A spinner on a terminal; a single progress line elsewhere."""
    console = err()
    if console.is_terminal:
        with console.status(message):
            yield
    else:
        console.print(Text(f"{message}"))
        yield


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _shown_state(s: Any) -> Text:
    """The STATE cell: Docker's own words for a container ("Up (healthy)"), else the state.

    The docker runtime reports `mac-<service>: <status>` in detail; its health in
    brackets decides the colour, as `docker ps` would.
    """
    container, _, status = s.detail.partition(": ")
    if container != f"mac-{s.name}" or not status:
        return styled(s.state)
    if "(unhealthy)" in status or not s.running:
        return Text(status, style="red" if s.state != "stopped" else "dim")
    return Text(status, style="yellow" if "(health: starting)" in status else "green")


def print_states(states: Sequence[Any], title: str = "") -> None:
    """The services' states (maccli.runtimes' ServiceState) as `mac status` shows them."""
    rows = [
        (
            s.name,
            _shown_state(s),
            styled(s.health) if s.state == "running" else styled("-"),
            str(s.port or "-"),
            format_duration(s.uptime),
            str(s.pid or "-"),
        )
        for s in states
    ]
    table(["SERVICE", "STATE", "HEALTH", "PORT", "UPTIME", "PID"], rows, title=title)
