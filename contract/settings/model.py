"""What a setting is: its name, kind, default, who reads it, where it is set, what it means.

A `Setting` is declared once (in this package's catalog modules) and read everywhere
through `Values`: Django's settings over the process environment, `mac` and the
exporters over the node's layered env files. A bad value raises `SettingError`, a plain
ValueError whose message names the setting and what to give instead; each side wraps it
in its own way (Django's ImproperlyConfigured, `mac`'s ConfigError).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from contract.settings.kinds import Kind


class SettingError(ValueError):
    """A setting's value that cannot be used; the message names it and the fix."""


class Side(StrEnum):
    """Who reads a setting."""

    AGENT = "agent"  # `mac` and the exporters on a node
    MASTER = "master"  # the master's services and `mac start master`
    BOTH = "both"  # agents and the master (a port, a token they share)
    DEVELOPMENT = "development"  # scripts/ and the tests; never a deployed MAC


class Applies(StrEnum):
    """Under which runtime of `mac` a setting has an effect."""

    BOTH = "both"
    PROCESS = "process"
    DOCKER = "docker"


class SetWith(StrEnum):
    """Where a setting can be given."""

    # `mac env set` (the per-node or per-user file) or the process environment.
    ENV_FILES = "mac env set"
    # The process environment only: it says where the env files are, or it is read
    # before they are (e.g. `MAC_NODE_ENV_FILE=... mac ...`).
    ENVIRONMENT = "environment"
    # Set by `mac` itself for the services it starts; not for people.
    MAC = "set by mac"


@dataclass(frozen=True)
class Derived:
    """A default that depends on other settings or on the host.

    `text` says what it is in the docs. `compute`, where given, works it out from the
    other settings' values (the same everywhere); without it the code that uses the
    setting decides, as `text` says, and the value read is None.
    """

    text: str
    compute: Callable[[Values], Any] | None = None


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    # The value when nothing sets it: a parsed value, None (unset), or Derived.
    default: Any
    meaning: str  # one line, for the docs' tables
    side: Side
    applies: Applies = Applies.BOTH
    applies_note: str = ""  # a word on the runtime column: "Docker: scale-out mode only"
    set_with: SetWith = SetWith.ENV_FILES
    see: str = ""  # where the docs say more: "docs/tls.md" or "docs/tls.md#anchor"
    readme: bool = False  # listed in the README's tables (every setting is in docs/settings.md)
    shown_default: str = ""  # the default as the docs write it, where `show` would not do
    group: str = ""  # the section of the docs' tables; set by the catalog

    @property
    def secret(self) -> bool:
        return self.kind.secret

    def parse(self, text: str | None) -> Any:
        """The value of `text`: the default when it is empty or unset (None for a Derived
        one, which `Values` computes); SettingError naming the setting otherwise."""
        text = (text or "").strip()
        if not text:
            if isinstance(self.default, Derived):
                return None
            # A copy: a caller that extends its list never changes the declaration's.
            return list(self.default) if isinstance(self.default, list) else self.default
        try:
            return self.kind.parse(self.name, text)
        except SettingError:
            raise
        except ValueError as exc:
            raise SettingError(str(exc)) from None

    def check(self, text: str) -> None:
        """Raise SettingError when `text` is not a value of this setting."""
        self.parse(text)

    def default_text(self) -> str:
        """The default as the docs show it."""
        if self.shown_default:
            return self.shown_default
        if isinstance(self.default, Derived):
            return self.default.text
        if self.default is None or self.default == []:
            return "unset"
        return self.kind.show(self.default)


class Values:
    """The typed values of the catalog's settings, read from one source of text.

    `source` gives a setting's text or None: `os.environ.get` on the master,
    `NodeConfig.get` (environment, per-node file, per-user file) on a node.
    """

    def __init__(self, source: Callable[[str], str | None], catalog: Mapping[str, Setting]) -> None:
        self._source = source
        self._catalog = catalog

    def setting(self, name: str) -> Setting:
        try:
            return self._catalog[name]
        except KeyError:
            raise KeyError(f"{name} is not declared in contract.settings") from None

    def given(self, name: str) -> bool:
        """Whether something sets `name` to a non-empty value."""
        self.setting(name)
        return bool((self._source(name) or "").strip())

    def __getitem__(self, name: str) -> Any:
        setting = self.setting(name)
        text = self._source(name)
        value = setting.parse(text)
        if value is None and isinstance(setting.default, Derived) and not (text or "").strip():
            compute = setting.default.compute
            return compute(self) if compute else None
        return value


@dataclass(frozen=True)
class Group:
    """Settings that belong together: one table of docs/settings.md."""

    title: str
    settings: tuple[Setting, ...]
