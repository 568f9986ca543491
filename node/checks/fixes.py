"""The cures `mac doctor --fix` can apply: steps as data, each with the exact line it prints.

A check that knows its cure returns it as steps (`CheckResult.steps`), and its `fix`
text is rendered from those steps, so what `mac doctor` prints is what `--fix` runs,
line for line. Paths in steps are the host's own (/etc/..., /proc/...): whoever applies
a step maps them through the CheckContext's roots (`CheckContext.local`), so tests and
containers point them at a prepared tree. Applying them is `mac`'s job (maccli.fixsteps:
it needs the runtimes for `mac restart agent`); this module only describes them.

Drivers and the NVIDIA Container Toolkit are never steps: installing them is the
operator's call, so those checks print the guide's commands and nothing applies them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import ClassVar

# Characters the echo/printf forms below cannot carry unquoted inside '...'.
_UNPRINTABLE = re.compile(r"['\\%]")


@dataclass(frozen=True)
class Run:
    """A command run as printed: argv, no shell. `root` adds the `sudo` it needs."""

    argv: tuple[str, ...]
    root: bool = True

    def line(self) -> str:
        return ("sudo " if self.root else "") + shlex.join(self.argv)


@dataclass(frozen=True)
class SetSysctl:
    """`sysctl -w key=value`: applied by writing /proc/sys/<key>, which is all sysctl does."""

    key: str
    value: str
    root: ClassVar[bool] = True

    def line(self) -> str:
        return f"sudo sysctl -w {self.key}={self.value}"

    @property
    def path(self) -> str:
        return "/proc/sys/" + self.key.replace(".", "/")


@dataclass(frozen=True)
class MakeDirs:
    """`mkdir -p path`."""

    path: str
    root: ClassVar[bool] = True

    def line(self) -> str:
        return f"sudo mkdir -p {shlex.quote(self.path)}"


@dataclass(frozen=True)
class WriteFile:
    """Replace a file's content; printed in the guide's `... | sudo tee FILE` form."""

    path: str
    content: str
    root: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not self.content.endswith("\n") or _UNPRINTABLE.search(self.content):
            raise ValueError(f"{self.path}: content must end with a newline, without ' \\ or %")

    def line(self) -> str:
        lines = self.content.removesuffix("\n").split("\n")
        target = shlex.quote(self.path)
        if len(lines) == 1:
            return f"echo '{lines[0]}' | sudo tee {target}"
        return "printf '" + "\\n".join(lines) + f"\\n' | sudo tee {target}"


@dataclass(frozen=True)
class SetSysctlInFile:
    """Rewrite every `key = ...` line of a sysctl file to `key = value` (sed -i, printed so).

    The key's dots are sed's any-character, as in the printed command, so the slash
    form (net/ipv4/ip_forward) that sysctl also reads is rewritten too.
    """

    path: str
    key: str
    value: str
    root: ClassVar[bool] = True

    @property
    def pattern(self) -> str:
        return f"^[[:space:]]*{self.key}[[:space:]]*=.*"

    def line(self) -> str:
        expression = f"s/{self.pattern}/{self.key} = {self.value}/"
        return f"sudo sed -i {shlex.quote(expression)} {shlex.quote(self.path)}"

    def rewrite(self, text: str) -> str:
        """What the sed command makes of `text`."""
        pattern = self.pattern.replace("[[:space:]]", r"[^\S\n]")
        return re.sub(pattern, f"{self.key} = {self.value}", text, flags=re.MULTILINE)


@dataclass(frozen=True)
class ApplySysctlFile:
    """`sysctl -p FILE`: the settings of this one file, not every file `--system` reads
    (which would re-apply the whole host's settings to change one)."""

    path: str
    root: ClassVar[bool] = True

    def line(self) -> str:
        return f"sudo sysctl -p {shlex.quote(self.path)}"


@dataclass(frozen=True)
class Mac:
    """A `mac` command (`mac restart agent`), run through mac's own runtimes."""

    args: tuple[str, ...]
    root: ClassVar[bool] = False

    def line(self) -> str:
        return "mac " + shlex.join(self.args)


Step = Run | SetSysctl | MakeDirs | WriteFile | SetSysctlInFile | ApplySysctlFile | Mac


def render(steps: tuple[Step, ...]) -> str:
    """The fix text of these steps: one shell line each, in order."""
    return "\n".join(step.line() for step in steps)


def needs_root(steps: tuple[Step, ...]) -> bool:
    return any(step.root for step in steps)
