"""What `mac env set` accepts: each key's rules, and how secrets are shown.

A value that would break an agent (a MASTER_IP that is no address, a port out of
range) is refused when it is written, with the key named, rather than found later.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from contract.pinning import parse_pin
from contract.services import AgentNetwork
from node.config import CA_PIN_KEY, MASTER_URL_KEY, ConfigError, valid_hostname
from node.envfile import KEY_RE


def valid_address_or_hostname(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return valid_hostname(value)


def network_mode_error(where: str, value: str) -> ConfigError:
    """What a bad MAC_AGENT_NETWORK (or --network) gets: the allowed values, and what they do."""
    return ConfigError(
        f"{where}={value!r} is not a network mode: use host (every exporter on the host "
        "network, the default) or bridge (published ports, the guide's layout)."
    )


def _check_port(key: str, value: str) -> None:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise ConfigError(f"{key}={value!r} is not a TCP port (1-65535).")


def _check_master_url(value: str) -> None:
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        parts = parts._replace(netloc="")
    host = parts.hostname or ""
    if parts.scheme not in {"http", "https"} or not valid_address_or_hostname(host):
        raise ConfigError(
            f"MASTER_URL={value!r} is not http(s)://<master>:<port> "
            "(e.g. https://10.0.0.5:28443, from the join line of `mac start master`)."
        )
    if parts.path.strip("/") or parts.query:
        raise ConfigError(f"MASTER_URL={value!r} must have no path: https://<master>:<port>.")


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
    if key == "MASTER_IP" and not valid_address_or_hostname(value):
        raise ConfigError(f"MASTER_IP={value!r} is neither an IP address nor a host name.")
    if key == MASTER_URL_KEY:
        _check_master_url(value)
    if key == CA_PIN_KEY:
        try:
            parse_pin(value)
        except ValueError as exc:
            raise ConfigError(f"{CA_PIN_KEY}: {exc}") from None
    if key == "NODE_NAME" and not valid_hostname(value):
        raise ConfigError(
            f"NODE_NAME={value!r} is not a valid host name (letters, digits, hyphens and dots)."
        )
    if key == "MAC_AGENT_NETWORK" and value not in set(AgentNetwork):
        raise network_mode_error(key, value)
    if key == "MAC_RUNTIME" and value not in {"auto", "docker", "process"}:
        raise ConfigError(f"MAC_RUNTIME={value!r}: use auto, docker or process.")
    if key == "MAC_MASTER_PORT" or (key.endswith("_PORT") and key.startswith("MAC_")):
        _check_port(key, value)
    if key == "MAC_PORT_OFFSET" and not re.fullmatch(r"-?\d+", value):
        raise ConfigError(f"MAC_PORT_OFFSET={value!r} is not an integer.")
    if key == "MAC_AGENT_IP":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ConfigError(f"MAC_AGENT_IP={value!r} is not an IP address.") from None


def mask(value: str) -> str:
    """A secret as `mac env list` shows it: enough to compare, not to use."""
    if len(value) <= 8:
        return "****"
    return f"****{value[-4:]}"
