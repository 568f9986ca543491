"""Strict readers for settings that come from the environment.

Every setting of the master is read through one of these helpers so that a bad
value stops start-up with a message naming the variable, instead of surfacing
later as an odd failure deep inside a request.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    return value.strip() if value is not None else None


def env_str(name: str, default: str = "") -> str:
    value = _raw(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool = False) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean; use 1/0, true/false or yes/no.")


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum of {minimum}.")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum of {maximum}.")
    return number


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum of {minimum}.")
    return number


# A Prometheus/Alertmanager duration: 30s, 5m, 1h30m, 500ms.
_DURATION = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")


def env_duration(name: str, default: str) -> str:
    """A duration as Prometheus and Alertmanager write it (`30s`, `5m`, `1h30m`)."""
    value = _raw(name)
    if value is None or value == "":
        return default
    if not _DURATION.match(value):
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a duration; write it as Prometheus does, e.g. 30s, 5m, 1h."
        )
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    value = _raw(name)
    if value is None or value == "":
        return list(default or [])
    return [item.strip() for item in value.split(",") if item.strip()]


def env_networks(name: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for item in env_list(name):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} contains {item!r}, which is not a network (expected e.g. 10.0.0.0/8)."
            ) from None
    return networks


def env_path(name: str, default: Path) -> Path:
    value = _raw(name)
    return Path(value).expanduser() if value else default


def env_or_file_secret(names: tuple[str, ...], path: Path) -> tuple[str, str]:
    """(secret, where it came from): the first of `names` set in the environment, else
    the content of `path`; ("", "") when neither holds one.

    Only reads: the file is written by `manage.py prepare_master`, never as a side
    effect of loading the settings.
    """
    for name in names:
        value = env_str(name)
        if value:
            return value, name
    try:
        value = path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return "", ""  # not prepared yet: the macweb.E001 check says so
    except OSError as exc:
        raise ImproperlyConfigured(
            f"The file {path} cannot be read ({exc.strerror or exc}); fix its "
            f"owner or mode, or set {names[-1]}."
        ) from None
    return (value, str(path)) if value else ("", "")
