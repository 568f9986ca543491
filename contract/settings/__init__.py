"""Every setting MAC reads, declared once: name, kind, default, limits, who reads it, under
which runtime it has an effect, where it is set, and what it means.

Both sides read through it: the master's Django settings (macweb.settings) over the
process environment, and `mac` and the exporters over the node's layered env files
(node.config). `mac env set` checks a value with the same declaration, and the docs'
tables (README.md, docs/cli.md, docs/settings.md) are generated from it
(`python -m contract.settings.tables --write`).

To add a setting: one `Setting(...)` in the group of its module (agent, launch, master,
scheduler, monitoring, development); read it with `values()[NAME]` (Django:
`macweb.envconf.setting(NAME)`, a node: `NodeConfig.value(NAME)`); regenerate the tables.
tests/contract/test_settings_declared.py fails while code reads a MAC_* name that is not
declared here, or one is declared that nothing reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace

from contract.settings import agent, development, launch, master, monitoring, scheduler
from contract.settings.kinds import duration_seconds, valid_duration
from contract.settings.master import HttpMode, LogLevel
from contract.settings.model import (
    Applies,
    Derived,
    Group,
    Setting,
    SettingError,
    SetWith,
    Side,
    Values,
)


def _catalog(groups: tuple[Group, ...]) -> dict[str, Setting]:
    found: dict[str, Setting] = {}
    for group in groups:
        for item in group.settings:
            if item.name in found:
                raise ValueError(
                    f"{item.name} is declared twice (in {found[item.name].group!r} too)"
                )
            found[item.name] = replace(item, group=group.title)
    return found


# In the order of the docs: the node, then the master, then MAC's own tooling.
GROUPS: tuple[Group, ...] = (
    *agent.GROUPS,
    *launch.GROUPS,
    *master.GROUPS,
    *scheduler.GROUPS,
    *monitoring.GROUPS,
    *development.GROUPS,
)
CATALOG: Mapping[str, Setting] = _catalog(GROUPS)
# The ones nobody but root should read: masked wherever MAC shows them.
SECRETS = frozenset(name for name, item in CATALOG.items() if item.secret)


def setting(name: str) -> Setting:
    """The declaration of `name`; KeyError naming it when it is not declared."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in contract.settings") from None


def values(source: Callable[[str], str | None] | None = None) -> Values:
    """Typed values read from `source` (a name -> text lookup; the process environment
    by default)."""
    return Values(source or os.environ.get, CATALOG)


def check(name: str, text: str) -> None:
    """Raise SettingError when `text` is not a value of the declared setting `name`."""
    setting(name).check(text)


__all__ = [
    "CATALOG",
    "GROUPS",
    "SECRETS",
    "Applies",
    "Derived",
    "Group",
    "HttpMode",
    "LogLevel",
    "SetWith",
    "Setting",
    "SettingError",
    "Side",
    "Values",
    "check",
    "duration_seconds",
    "problems",
    "setting",
    "valid_duration",
    "values",
]


def problems(source: Callable[[str], str | None], sides: tuple[Side, ...]) -> list[str]:
    """What is wrong with the settings of `sides` that `source` gives: one message each,
    naming the setting and what to give (before anything starts: `mac start master`)."""
    found = []
    read = values(source)
    for name, item in CATALOG.items():
        if item.side in sides:
            try:
                read[name]
            except SettingError as exc:
                found.append(str(exc))
    return found
