"""One of scripts/, copied as it is into a temporary checkout and run against stand-ins.

What the script would change on the machine (apt-get, dpkg, systemctl, psql, runuser, the
servers) is a fake on a PATH that holds nothing else but a few harmless tools (coreutils,
awk, ...): nothing of the machine is changed, and no other program of it is found on PATH
(scripts/bootstrap's look at /usr/sbin and /usr/share still sees the machine's, read-only).
The fakes share a folder, `state`, that stands for the machine (which packages are
installed, which services enabled), and write each call to `calls`, one line each; run
without the sandbox's environment, they stop at once.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Where the scripts under test are copied from.
SCRIPTS = REPO / "scripts"
# The real programs on the sandbox's PATH: none of them changes anything outside the
# folders a script is given.
TOOLS = (
    "bash", "sh", "env", "id", "seq", "awk", "sleep", "mkdir", "rm", "mv", "cp", "touch",
    "cat", "dirname", "basename", "od", "tr", "grep", "sed", "head", "tail", "sort", "cut",
    "chmod", "ls", "mktemp", "rmdir", "wc", "tee", "true", "false", "stat", "readlink",
)  # fmt: skip
PREAMBLE = """#!/bin/sh
# A stand-in for {name}: records the call, then acts on the sandbox's state only (and
# stops at once without it, rather than act on paths that would be the machine's).
: "${{FAKE_STATE:?}}" "${{FAKE_CALLS:?}}" "${{FAKE_BIN:?}}"
printf '%s\\n' "{name} $*" >> "$FAKE_CALLS"
"""


@dataclass
class Sandbox:
    root: Path
    repo: Path = field(init=False)
    bin: Path = field(init=False)
    state: Path = field(init=False)
    calls: Path = field(init=False)

    def __post_init__(self) -> None:
        self.repo = self.root / "repo"
        self.bin = self.root / "bin"
        self.state = self.root / "state"
        self.calls = self.root / "calls"
        tools = self.root / "tools"
        for folder in (self.repo / "scripts", self.bin, self.state, tools, self.root / "home"):
            folder.mkdir(parents=True, exist_ok=True)
        for tool in TOOLS:
            found = shutil.which(tool)
            if found:
                (tools / tool).symlink_to(found)
        self.calls.touch()

    def script(self, name: str) -> Path:
        """Copy scripts/NAME into the sandbox's checkout, as it is."""
        copy = self.repo / "scripts" / name
        shutil.copy2(SCRIPTS / name, copy)
        return copy

    def fake(self, name: str, body: str = "exit 0\n") -> Path:
        """A stand-in for the command NAME: the preamble (the call recorded), then BODY (sh)."""
        path = self.bin / name
        path.write_text(PREAMBLE.format(name=name) + body)
        path.chmod(0o755)
        return path

    def write(self, relative: str, text: str, mode: int = 0o644) -> Path:
        """A file of the sandbox's checkout."""
        path = self.repo / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
        return path

    def _environment(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:{self.root / 'tools'}",
            "HOME": str(self.root / "home"),
            "LANG": "C.UTF-8",
            "FAKE_STATE": str(self.state),
            "FAKE_CALLS": str(self.calls),
            "FAKE_BIN": str(self.bin),
        }

    def run(
        self, name: str, *args: str, timeout: float = 60, prefix: Sequence[str] = (), **env: str
    ):
        """scripts/NAME ARGS in the sandbox, with only the environment given here (and
        PREFIX before it: nsenter, say)."""
        return subprocess.run(
            [*prefix, str(self.root / "tools" / "bash"), str(self.repo / "scripts" / name), *args],
            cwd=self.root,
            env={**self._environment(), **env},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen:
        """scripts/NAME ARGS as `run` has it, left running, in a session of its own (a
        terminal's foreground group: os.killpg(process.pid, SIGINT) is its Ctrl-C)."""
        return subprocess.Popen(
            [str(self.root / "tools" / "bash"), str(self.repo / "scripts" / name), *args],
            cwd=self.root,
            env={**self._environment(), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def run_command(self, argv: list[str], **env: str):
        """Any command with the sandbox's environment (a fake, to ask it something)."""
        return subprocess.run(
            argv, env={**self._environment(), **env}, capture_output=True, text=True, timeout=60
        )

    def called(self, name: str) -> list[str]:
        """The recorded calls of NAME, each as its arguments."""
        return [
            line[len(name) + 1 :]
            for line in self.calls.read_text().splitlines()
            if line == name or line.startswith(name + " ")
        ]

    def order(self) -> list[str]:
        """Every recorded call, in order."""
        return self.calls.read_text().splitlines()


def needs_tools() -> str | None:
    """Why the sandbox cannot run here (a tool missing), or None."""
    missing = [tool for tool in ("bash", "sh", "env", "awk", "od") if not shutil.which(tool)]
    return f"{', '.join(missing)} not on PATH" if missing else None
