"""Input rules shared by the registration API and the admin.

Hostnames follow RFC 1123, lower-cased. Free text must be storable: PostgreSQL
refuses NUL in text and JSON, and a lone UTF-16 surrogate (JSON's "\\ud800") cannot
be encoded as UTF-8, so either one stored would fail the insert or, on SQLite,
every later page that shows it.
"""

from __future__ import annotations

import re

MAX_HOSTNAME = 253
UNSTORABLE = "contains a NUL character or a lone surrogate, which cannot be stored."
# storable_text's rule as an OpenAPI pattern, for the schema of every free-text input (the
# API's fields and the filters' parameters): the schema accepts exactly what the server does.
TEXT_PATTERN = "^[^\\u0000]*$"
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


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
