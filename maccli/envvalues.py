"""What `mac env set` accepts: each setting's rules, from its one declaration, and how
secrets are shown.

A value that would break an agent or the master (a MASTER_IP that is no address, a port
out of range, a drain mode that does not exist) is refused when it is written, with the
setting named and what to give, rather than found later. The rules are those of
contract.settings, which the master's settings and the agent's commands read too.
"""

from __future__ import annotations

import difflib
import shlex

from contract import settings
from node.config import ConfigError
from node.envfile import KEY_RE


class UnknownSetting(ConfigError):
    """A MAC_* name nothing reads; `meant` is the declared name closest to it, if any."""

    def __init__(self, key: str) -> None:
        close = difflib.get_close_matches(key, list(settings.CATALOG), n=1, cutoff=0.8)
        self.meant = close[0] if close else ""
        maybe = f" Did you mean {self.meant}?" if self.meant else ""
        super().__init__(
            f"{key} is not a setting of MAC.{maybe} Every setting is listed in docs/settings.md."
        )


def validate(key: str, value: str) -> None:
    """Raise ConfigError naming the key when KEY=VALUE cannot be stored."""
    if not KEY_RE.match(key):
        raise ConfigError(
            f"{key!r} is not a valid name: use capital letters, digits and underscores "
            "(for example MASTER_IP)."
        )
    if any(ch in value for ch in "\n\r\0"):
        raise ConfigError(f"the value of {key} contains a line break or NUL byte.")
    if value != value.strip():
        raise ConfigError(f"the value of {key} starts or ends with spaces.")
    if value == "":
        raise ConfigError(f"the value of {key} is empty; to remove it use: mac env unset {key}")
    declared = settings.CATALOG.get(key)
    if declared is None:
        if key.startswith("MAC_"):
            raise UnknownSetting(key)
        return  # another program's variable, passed to the services as it is
    if declared.set_with is settings.SetWith.ENVIRONMENT:
        raise ConfigError(
            f"{key} is read from the process environment only, never from the env files: "
            f"give it on the command line instead (e.g. {printable(key, value)} mac ...)."
        )
    try:
        declared.check(value)
    except settings.SettingError as exc:
        raise ConfigError(str(exc)) from None


def mask(value: str) -> str:
    """A secret as `mac env list` shows it: enough to compare, not to use."""
    if len(value) <= 8:
        return "****"
    return f"****{value[-4:]}"


def printable(key: str, value: str) -> str:
    """KEY=VALUE for a command printed to copy: quoted for the shell, and a secret's value
    as <value> (it is not printed where anyone may read the terminal or its log)."""
    if key in settings.SECRETS:
        return f"{key}=<value>"
    return shlex.quote(f"{key}={value}")
