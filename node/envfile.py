"""The KEY=VALUE files of `mac env` (/etc/mango/mac/env, ~/.mac/env), read and written.

Reading is python-dotenv's, the parser Compose's `env_file` follows too, so an inline
comment (`A=1 # note`), `export`, quotes and escapes mean the same to `mac`, to the
exporters and to Docker. Values are taken literally (no `${VAR}` expansion), as
Compose 1.29 does. Writing keeps every other line and comment of the file and
replaces it atomically, owner-only: the per-node file holds the node key.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
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


def read_env_file(path: Path) -> dict[str, str]:
    """The file's values; an absent file is empty. PermissionError propagates to the caller."""
    try:
        return parse_env_text(path.read_text())
    except FileNotFoundError:
        return {}


def _line_key(line: str) -> str | None:
    stripped = line.strip()
    if not stripped or stripped.startswith("#") or "=" not in stripped:
        return None
    return stripped.removeprefix("export ").partition("=")[0].strip()


def write_env_file(
    path: Path, updates: Mapping[str, str | None], *, mode: int = ENV_FILE_MODE
) -> None:
    """Set (or, with None, remove) keys, keeping other lines and comments; atomic rename."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        lines = []
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
