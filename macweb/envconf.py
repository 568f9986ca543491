"""The master's settings from the environment, through the one declaration of them.

Every setting's kind, default and limits come from contract.settings, which `mac` reads
too; a bad value stops start-up with its message (naming the variable and what to give)
as Django's ImproperlyConfigured, instead of surfacing later deep inside a request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from contract.settings import SettingError, values

_ENVIRONMENT = values()


def setting(name: str) -> Any:
    """The value of the declared setting `name` in the process environment."""
    try:
        return _ENVIRONMENT[name]
    except SettingError as exc:
        raise ImproperlyConfigured(str(exc)) from None


def text(name: str) -> str:
    """A setting whose absence reads as "" (a token, a URL, a name)."""
    value = setting(name)
    return "" if value is None else str(value)


def env_or_file_secret(names: tuple[str, ...], path: Path) -> tuple[str, str]:
    """(secret, where it came from): the first of `names` set in the environment, else
    the content of `path`; ("", "") when neither holds one.

    Only reads: the file is written by `manage.py prepare_master`, never as a side
    effect of loading the settings.
    """
    for name in names:
        value = text(name)
        if value:
            return value, name
    # "" when not prepared yet: the macweb.E001 check says so.
    value = file_value(path, f"fix its owner or mode, or set {names[-1]}")
    return (value, str(path)) if value else ("", "")


def file_value(path: Path, fix: str) -> str:
    """The content of a file prepare_master writes, "" while it does not exist; a file
    that cannot be read stops start-up, saying `fix`."""
    try:
        return path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except OSError as exc:
        raise ImproperlyConfigured(
            f"The file {path} cannot be read ({exc.strerror or exc}); {fix}."
        ) from None
