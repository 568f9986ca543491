"""The KEY=VALUE files of `mac env` (/etc/mango/mac/env, ~/.mac/env), read and written.

Reading is python-dotenv's, the parser Compose's `env_file` follows too, so an inline
comment (`A=1 # note`), `export`, quotes and escapes mean the same to `mac`, to the
exporters and to Docker. Values are taken literally (no `${VAR}` expansion), as
Compose 1.29 does. Writing keeps every other line and comment of the file and
replaces it atomically, owner-only: the per-node file holds the node key.
"""

from __future__ import annotations

import io
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from dotenv import dotenv_values

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


def _line_key(line: str) -> str | None:
    stripped = line.strip()
    if not stripped or stripped.startswith("#") or "=" not in stripped:
        return None
    return stripped.removeprefix("export ").partition("=")[0].strip()


def write_env_file(
    path: Path, updates: Mapping[str, str | None], *, mode: int = ENV_FILE_MODE
) -> None:
    """Set (or, with None, remove) keys, keeping other lines and comments; atomic rename."""
    lines = (_read_text(path) or "").splitlines()
    pending = dict(updates)
    out: list[str] = []
    for line in lines:
        key = _line_key(line)
        if key is not None and key in pending:
            value = pending.pop(key)
            if value is not None:
                out.append(f"{key}={value}")
            continue
        out.append(line)
    out.extend(f"{key}={value}" for key, value in pending.items() if value is not None)
    write_atomically(path, ("\n".join(out) + ("\n" if out else "")).encode(), mode=mode)
