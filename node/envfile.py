"""The KEY=VALUE files of `mac env` (/etc/mango/mac/env, ~/.mac/env), read and written.

Reading is python-dotenv's, the parser Compose's `env_file` follows too, so an inline
comment (`A=1 # note`), `export`, quotes and escapes mean the same to `mac`, to the
exporters and to Docker. Values are taken literally (no `${VAR}` expansion), as
Compose 1.29 does. Writing keeps every other line and comment of the file and
replaces it atomically, owner-only: the per-node file holds the node key. A value is
written so that this same parser reads it back exactly (double-quoted where a bare one
would not be: a password with ` #` or quotes), one line per key, under an exclusive lock
(`<file>.lock`) so that concurrent writers do not undo each other.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from dotenv import dotenv_values
from dotenv.parser import parse_stream

from contract.atomicfile import write_atomically

# Both env files may hold the join token, the per-node one the node key: owner only.
ENV_FILE_MODE = 0o600
KEY_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def parse_env_text(text: str) -> dict[str, str]:
    """KEY=VALUE pairs of an env file's text; lines without a value or a valid key are left out."""
    values = dotenv_values(stream=io.StringIO(text), interpolate=False)
    return {key: value for key, value in values.items() if value is not None and KEY_RE.match(key)}


class EnvFileError(ValueError):
    """An env file that is there but cannot be read as one: the message names the file
    and why; ``commands`` are what to run to fix it."""

    def __init__(self, message: str, commands: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.commands = list(commands)


def _sudo(path: Path) -> str:
    """`sudo ` where this user cannot replace the file (the per-node one, as a user)."""
    return "" if os.access(path.parent, os.W_OK) else "sudo "


def _read_text(path: Path) -> str | None:
    """The file's text, None when absent; PermissionError propagates to the caller, any
    other failure is an EnvFileError that says what to do (never a traceback)."""
    try:
        # UTF-8 whatever the locale: what write_env_file writes and Compose reads.
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except PermissionError:
        raise
    except UnicodeDecodeError as exc:
        sudo, quoted = _sudo(path), shlex.quote(str(path))
        line = exc.object.count(b"\n", 0, exc.start) + 1
        # umask 077: the converted copy stays owner-only, as the file may hold a key.
        convert = f'umask 077 && iconv -f latin1 -t utf-8 -o "{path}.utf8" "{path}"'
        raise EnvFileError(
            f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line {line}). "
            "Retype that line, or convert the file if it was written as Latin-1:",
            commands=[
                f"{sudo}sh -c '{convert}'",
                f"{sudo}mv {shlex.quote(f'{path}.utf8')} {quoted}",
            ],
        ) from None
    except IsADirectoryError:
        sudo, quoted = _sudo(path), shlex.quote(str(path))
        raise EnvFileError(
            f"{path} is a directory, not an env file. Move it aside; `mac env set` then "
            "writes the file:",
            commands=[f"{sudo}mv {quoted} {shlex.quote(f'{path}.bak')}"],
        ) from None
    except OSError as exc:
        raise EnvFileError(
            f"cannot read {path}: {exc.strerror or exc}. Check it:",
            commands=[f"ls -ld {shlex.quote(str(path))}"],
        ) from None


def read_env_file(path: Path) -> dict[str, str]:
    """The file's values; an absent file is empty. PermissionError propagates to the caller;
    a file that cannot be read as text is an EnvFileError."""
    text = _read_text(path)
    return {} if text is None else parse_env_text(text)


def _check_storable(key: str, value: str) -> None:
    # One line per setting, and a process environment cannot hold NUL: such a value would
    # come back changed or cut, so it is refused rather than written.
    if any(ch in value for ch in "\n\r\0"):
        raise EnvFileError(
            f"the value of {key} contains a line break or NUL byte, which an env file "
            "cannot hold on one line."
        )


def env_line(key: str, value: str) -> str:
    """KEY=VALUE as written so that python-dotenv (the reader) gives `value` back exactly:
    bare where that reads back, else double-quoted with `\\` and `"` escaped; an
    EnvFileError naming the key for a value no line can hold."""
    _check_storable(key, value)
    bare = f"{key}={value}"
    # Parsed with the reader's own parser: `a #b` loses its comment, `"x"` its quotes.
    if parse_env_text(bare) == {key: value}:
        return bare
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    quoted = f'{key}="{escaped}"'
    if parse_env_text(quoted) == {key: value}:
        return quoted
    raise EnvFileError(f"the value of {key} cannot be written so that it reads back as given.")


@contextlib.contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    """An exclusive flock on `<file>.lock` beside it, for one read-modify-replace: the file
    itself is replaced by a rename, so a lock on it would be on the old copy. The lock file
    stays (removing it would let two writers hold locks on different files)."""
    lock = path.with_name(f"{path.name}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    except PermissionError:
        try:  # one another user created: a read-only descriptor locks as well
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise EnvFileError(
                f"cannot lock {path} for writing: {lock}: {exc.strerror or exc}. Check it:",
                commands=[f"ls -l {shlex.quote(str(lock))}"],
            ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _leading_lines(text: str) -> str:
    """The blank lines that dotenv reads as the start of the next binding, kept in place."""
    blank = text[: len(text) - len(text.lstrip())]
    return blank[: blank.rfind("\n") + 1]


def _edited(text: str, updates: Mapping[str, str | None]) -> str:
    """The file's text with each key of `updates` set where it first appears (appended when
    absent) and every other line of it dropped: dotenv uses a key's last line, so a second
    one left behind would win over the value just set, or keep a removed key set."""
    lines = {key: env_line(key, value) for key, value in updates.items() if value is not None}
    out: list[str] = []
    for binding in parse_stream(io.StringIO(text)):
        original = binding.original.string
        if binding.key is None or binding.key not in updates:
            out.append(original)
            continue
        out.append(_leading_lines(original))
        line = lines.pop(binding.key, None)  # only at the key's first line
        if line is not None:
            out.append(line + "\n")
    edited = "".join(out)
    if lines and edited and not edited.endswith("\n"):
        edited += "\n"
    return edited + "".join(f"{line}\n" for line in lines.values())


def _unreadable_lines(text: str) -> list[int]:
    return [b.original.line for b in parse_stream(io.StringIO(text)) if b.error]


def write_env_file(
    path: Path, updates: Mapping[str, str | None], *, mode: int = ENV_FILE_MODE
) -> None:
    """Set (or, with None, remove) keys, keeping other lines and comments; atomic rename,
    under an exclusive lock so that concurrent writers (`mac env set`, the registration
    saving the node key) each keep the other's keys. What is written is parsed back first:
    an EnvFileError, and the file left as it was, where a key would not read back as given."""
    for key, value in updates.items():
        if value is not None:
            env_line(key, value)  # refuse before touching anything
    with _locked(path, mode):
        text = _edited(_read_text(path) or "", updates)
        parsed = parse_env_text(text)
        for key, value in updates.items():
            if parsed.get(key) != value:
                where = ", ".join(str(n) for n in _unreadable_lines(text))
                raise EnvFileError(
                    f"{key} would not read back from {path} as given: "
                    + (f"line {where} of it cannot be read as KEY=VALUE " if where else "")
                    + "(an unclosed quote swallows the lines after it). Fix the file and "
                    "run again:",
                    commands=[f"{_sudo(path)}${{EDITOR:-vi}} {shlex.quote(str(path))}"],
                )
        write_atomically(path, text.encode(), mode=mode)
