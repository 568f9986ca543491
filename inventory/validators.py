"""Input rules shared by the registration API and the admin.

Hostnames follow RFC 1123, lower-cased. Free text must be storable: PostgreSQL
refuses NUL in text and JSON, and a lone UTF-16 surrogate (JSON's "\\ud800") cannot
be encoded as UTF-8, so either one stored would fail the insert or, on SQLite,
every later page that shows it. What the agent reports in JSON (its NICs, exporters
and labels) has a shape every reader relies on: the node page looks a port up in
`exporters`, the sweep probes each of its names, so a list stored there, from the API
or the admin alike, would break the pages and sweeps that read it.
"""

from __future__ import annotations

import math
import re

MAX_HOSTNAME = 253
UNSTORABLE = "contains a NUL character or a lone surrogate, which cannot be stored."
# storable_text's rule as an OpenAPI pattern, for the schema of every free-text input (the
# API's fields and the filters' parameters): the schema accepts exactly what the server does.
TEXT_PATTERN = "^[^\\u0000]*$"
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")

MAX_GPUS = 1024
MAX_LABELS = 32
MAX_LABEL_VALUE = 256
MAX_NICS = 64
MAX_NIC_KEYS = 32
MAX_NIC_KEY = 64
MAX_NIC_VALUE = 256
MAX_EXPORTERS = 32
LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}")
LABEL_KEY_HELP = "1 to 63 letters, digits, '_', '.', '-' or '/', starting with a letter or digit."
SERVICE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
SERVICE_NAME_HELP = "service names are lower-case letters, digits and hyphens."


def normalize_hostname(value: object) -> str:
    """The lower-cased hostname if it follows RFC 1123; ValueError naming the fault otherwise."""
    if not isinstance(value, str):
        raise ValueError("must be a string.")
    if value == "":
        raise ValueError("must not be empty.")
    if len(value) > MAX_HOSTNAME:
        raise ValueError(f"is {len(value)} characters long; the limit is {MAX_HOSTNAME}.")
    if not value.isascii():
        # Before lower(): the Kelvin sign (U+212A) lowers to "k" and would pass as ASCII.
        raise ValueError(
            "must be ASCII: RFC 1123 labels are letters, digits and hyphens (an "
            "internationalised name goes in its xn-- form)."
        )
    name = value.lower()
    for label in name.split("."):
        if not _LABEL.fullmatch(label):
            shown = label if len(label) <= 70 else label[:67] + "..."
            raise ValueError(
                f"label {shown!r} is not valid: RFC 1123 labels are 1 to 63 letters, digits "
                "or hyphens, and do not start or end with a hyphen."
            )
    return name


def storable_text(value: str) -> bool:
    """True when `value` has no NUL and encodes as UTF-8 (no lone surrogates)."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_keys(value: dict, *, max_entries: int, key_pattern: re.Pattern, key_help: str) -> dict:
    """`value` if it has at most `max_entries` keys, each matching `key_pattern`."""
    if len(value) > max_entries:
        raise ValueError(f"At most {max_entries} entries are allowed.")
    for key in value:
        if not key_pattern.fullmatch(key):
            raise ValueError(f"Key {key[:70]!r} is not valid: {key_help}")
    return value


def check_nic(value: object) -> dict:
    """One NIC as the agent describes it: a flat JSON object of storable scalars."""
    if not isinstance(value, dict):
        raise ValueError("Each NIC must be a JSON object.")
    if len(value) > MAX_NIC_KEYS:
        raise ValueError(f"A NIC may have at most {MAX_NIC_KEYS} keys.")
    for key, item in value.items():
        if len(key) > MAX_NIC_KEY:
            raise ValueError(f"NIC key {key[:MAX_NIC_KEY]!r}... is too long (>{MAX_NIC_KEY}).")
        if not storable_text(key):
            raise ValueError(f"NIC key {key!r} {UNSTORABLE}")
        if item is not None and not isinstance(item, str | int | float | bool):
            raise ValueError(f"NIC value of {key!r} must be a scalar.")
        if isinstance(item, str) and len(item) > MAX_NIC_VALUE:
            raise ValueError(f"NIC value of {key!r} is too long (>{MAX_NIC_VALUE}).")
        if isinstance(item, str) and not storable_text(item):
            raise ValueError(f"NIC value of {key!r} {UNSTORABLE}")
        if isinstance(item, float) and not math.isfinite(item):
            # 1e400 parses as infinity, which JSON columns cannot hold.
            raise ValueError(f"NIC value of {key!r} is out of range.")
        if isinstance(item, int) and not isinstance(item, bool) and not -(2**63) <= item < 2**64:
            raise ValueError(f"NIC value of {key!r} is out of range.")
    return value


# Whole fields, for a form that takes each as one JSON document (the admin's): the API
# checks the same rules field by field, so that its 400 points at the entry at fault.


def check_nics(value: object) -> list:
    """The NIC list: a JSON list of at most MAX_NICS check_nic objects."""
    if not isinstance(value, list):
        raise ValueError('Must be a JSON list of NIC objects, e.g. [{"name": "mlx5_0"}].')
    if len(value) > MAX_NICS:
        raise ValueError(f"Has {len(value)} NICs; the limit is {MAX_NICS}.")
    for position, nic in enumerate(value):
        try:
            check_nic(nic)
        except ValueError as exc:
            raise ValueError(f"Item {position}: {exc}") from None
    return value


def check_exporters(value: object) -> dict:
    """{service name: port}: the exporters the agent runs, each port 1 to 65535."""
    if not isinstance(value, dict):
        raise ValueError(
            'Must be a JSON object of service name to port, e.g. {"sys-exporter": 29101}.'
        )
    check_keys(
        value, max_entries=MAX_EXPORTERS, key_pattern=SERVICE_NAME, key_help=SERVICE_NAME_HELP
    )
    ports = {}
    for name, port in value.items():
        if isinstance(port, float) and math.isfinite(port) and port.is_integer():
            port = int(port)  # 29101.0 is a JSON integer, as the API takes it
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"The port of {name!r} must be a whole number from 1 to 65535.")
        ports[name] = port
    return ports


def check_labels(value: object) -> dict:
    """{key: text}: the node's labels, at most MAX_LABELS, each value storable text."""
    if not isinstance(value, dict):
        raise ValueError('Must be a JSON object of label to text, e.g. {"rack": "r12"}.')
    check_keys(value, max_entries=MAX_LABELS, key_pattern=LABEL_KEY, key_help=LABEL_KEY_HELP)
    for key, text in value.items():
        if not isinstance(text, str):
            raise ValueError(f"The value of {key!r} must be text (quoted).")
        if len(text) > MAX_LABEL_VALUE:
            raise ValueError(f"The value of {key!r} is too long (>{MAX_LABEL_VALUE}).")
        if not storable_text(text):
            raise ValueError(f"The value of {key!r} {UNSTORABLE}")
    return value
