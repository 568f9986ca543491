"""Readers for the settings whose values have a small grammar of their own.

Each takes (name, text) and returns the value, or raises ValueError naming the setting
and what to write instead, as every kind does (contract.settings.kinds).
"""

from __future__ import annotations

import re

from contract.pinning import parse_pin
from contract.settings.kinds import refuse, valid_duration

# What DRF's throttles and nginx's limit_req both understand: "<count>/<period>".
RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")
_RULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def ca_pin(name: str, text: str) -> str:
    """64 hex digits, bare or after `sha256:`; stored as the bare lower-case digits."""
    try:
        return parse_pin(text)
    except ValueError:
        raise refuse(
            name,
            text,
            "give the 64 hex digits of the join line of `mac start master` "
            "(optionally after sha256:)",
            "is not a CA pin",
        ) from None


def labels(name: str, text: str) -> dict[str, str]:
    """``rack=a1,role=gpu`` as a dict."""
    found: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise refuse(
                name, text, "write key=value pairs, e.g. rack=a1,role=gpu", f"has {item!r}"
            )
        found[key.strip()] = value.strip()
    return found


def rule_durations(name: str, text: str) -> str:
    """``MacNodeOffline=3m,GpuXidError=0s``: the `for:` of alert rules by name, kept as
    text. Which rule names exist is the master's to say (scraping.promconfig)."""
    for item in filter(None, (part.strip() for part in text.split(","))):
        rule, sep, duration = (piece.strip() for piece in item.partition("="))
        if not sep or not _RULE_NAME.fullmatch(rule) or not valid_duration(duration, zero=True):
            raise refuse(
                name,
                text,
                "write RULE=DURATION pairs, e.g. MacNodeOffline=3m,GpuXidError=0s (each "
                "duration as Prometheus writes it: each unit once, largest first)",
                f"has {item!r}",
            )
    return text


def rate(name: str, text: str) -> str:
    if not RATE.fullmatch(text):
        raise refuse(
            name, text, "use <count>/<period>, e.g. 600/min, 20/s or 10000/hour", "is not a rate"
        )
    return text
