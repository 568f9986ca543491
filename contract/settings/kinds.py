"""The kinds of value a setting holds: how its text is read, checked and described.

Each kind turns the text of an environment variable (or an env file line) into a value,
or raises ``ValueError`` with a sentence that names the setting, what was wrong and what
to give instead. The same object describes itself for the generated tables of the docs
(``describe``) and shows a default the way a person would type it (``show``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
# A duration as Prometheus reads it (prometheus/common's model.ParseDuration, which
# Prometheus, promtool, Alertmanager and vmalert's rule files all use): 30s, 5m, 1h30m,
# 500ms; each unit at most once and the largest first (y w d h m s ms), no sign, no
# fraction, and "0" alone for zero. "30s5m" or "1m1m" stop Prometheus from starting.
_DURATION = re.compile(
    r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?"
)
_DURATION_PART = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_DOCKER_REFUSES = re.compile(r"[0-9]+[dwy]")
_DURATION_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 7 * 86_400_000,
    "y": 365 * 86_400_000,
}
# The longest duration Go holds (time.Duration: int64 nanoseconds), in milliseconds.
_DURATION_MAX_MS = (2**63 - 1) // 1_000_000
# Bytes, or a number with the unit VictoriaMetrics and Prometheus take (KB...TiB).
_SIZE = re.compile(r"[1-9][0-9]*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)?")
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_DIGITS_AND_DOTS = re.compile(r"[0-9.]+")


def refuse(name: str, text: str, want: str, wrong: str = "") -> ValueError:
    """The one shape of every refusal: ``NAME='text' <what is wrong>: <what to give>.``"""
    head = f"{name}={text!r}" + (f" {wrong}" if wrong else "")
    return ValueError(f"{head}: {want}.")


def duration_seconds(text: str) -> float:
    """Seconds in a duration the Duration kind accepted ("1h30m" -> 5400.0; y is 365 days)."""
    return _milliseconds(text) / 1000


def _milliseconds(text: str) -> int:
    return sum(int(number) * _DURATION_MS[unit] for number, unit in _DURATION_PART.findall(text))


def valid_duration(text: str, *, zero: bool = False) -> bool:
    """Whether Prometheus reads `text` as a duration (see _DURATION), and, unless `zero`,
    one above zero: a zero scrape or group interval is silently replaced or refused by
    the engine, while a rule's `for: 0s` means "at once". The one check of every duration
    MAC writes for Prometheus, Alertmanager or vmalert."""
    if text == "0":
        return zero
    if not text or not _DURATION.fullmatch(text):
        return False
    milliseconds = _milliseconds(text)
    return milliseconds <= _DURATION_MAX_MS and (zero or milliseconds > 0)


def valid_hostname(name: str) -> bool:
    """RFC 1123 host name (labels of letters, digits and hyphens, at most 253 chars)."""
    if not name or len(name) > 253:
        return False
    return all(_HOST_LABEL.match(label) for label in name.lower().rstrip(".").split("."))


def looks_like_ipv4(value: str) -> bool:
    """Digits and dots only: meant as an IPv4 address, never a host name (RFC 1123 2.1:
    a name's last label is never all digits, so 10.0.0.256 is a mistyped address)."""
    return bool(_DIGITS_AND_DOTS.fullmatch(value))


def valid_address_or_hostname(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return not looks_like_ipv4(value) and valid_hostname(value)


class Kind:
    """How one setting's text becomes its value."""

    secret = False

    def parse(self, name: str, text: str) -> Any:
        """The value written in `text` (never empty: empty means the default)."""
        return text

    def describe(self) -> str:
        """What the docs' tables say the setting takes."""
        return "text"

    def show(self, value: Any) -> str:
        """A value as a person would write it (for defaults in the docs and `mac env list`)."""
        return str(value)


@dataclass(frozen=True)
class Text(Kind):
    """Free text, or text that must match `pattern` (described by `looks_like`)."""

    pattern: str = ""
    looks_like: str = ""

    def parse(self, name: str, text: str) -> str:
        if self.pattern and not re.fullmatch(self.pattern, text):
            raise refuse(name, text, f"give {self.looks_like}", "is not valid")
        return text

    def describe(self) -> str:
        return self.looks_like or "text"


@dataclass(frozen=True)
class Secret(Kind):
    """A password, token or key: masked wherever MAC shows it."""

    secret = True

    def describe(self) -> str:
        return "secret"


@dataclass(frozen=True)
class Flag(Kind):
    """On or off: 1/0, true/false, yes/no, on/off, in any case."""

    def parse(self, name: str, text: str) -> bool:
        lowered = text.lower()
        if lowered in TRUE_WORDS:
            return True
        if lowered in FALSE_WORDS:
            return False
        raise refuse(name, text, "use 1 or 0 (or true/false, yes/no, on/off)", "is not on or off")

    def describe(self) -> str:
        return "1 or 0"

    def show(self, value: Any) -> str:
        return "1" if value else "0"


def _range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" from {low:g} to {high:g}"
    if low is not None:
        return f", at least {low:g}"
    if high is not None:
        return f", at most {high:g}"
    return ""


@dataclass(frozen=True)
class Integer(Kind):
    """A whole number within [low, high]; `unit` says what it counts."""

    low: int | None = None
    high: int | None = None
    unit: str = ""

    def describe(self) -> str:
        unit = f" of {self.unit}" if self.unit else ""
        return f"whole number{unit}{_range(self.low, self.high)}"

    def parse(self, name: str, text: str) -> int:
        want = f"use a {self.describe()}"
        try:
            number = int(text)
        except ValueError:
            raise refuse(name, text, want, "is not a whole number") from None
        if (self.low is not None and number < self.low) or (
            self.high is not None and number > self.high
        ):
            raise refuse(name, text, want, "is out of range")
        return number


@dataclass(frozen=True)
class Port(Kind):
    """A TCP port, 1 to 65535."""

    def parse(self, name: str, text: str) -> int:
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
            raise refuse(name, text, "use a port from 1 to 65535", "is not a TCP port")
        return int(text)

    def describe(self) -> str:
        return "TCP port"


@dataclass(frozen=True)
class Number(Kind):
    """A number (decimals allowed) within [low, high]; seconds unless `unit` says otherwise."""

    low: float | None = None
    high: float | None = None
    unit: str = "seconds"

    def parse(self, name: str, text: str) -> float:
        want = f"use a number of {self.describe()}"
        try:
            number = float(text)
        except ValueError:
            raise refuse(name, text, want, "is not a number") from None
        if number != number or (  # NaN
            (self.low is not None and number < self.low)
            or (self.high is not None and number > self.high)
        ):
            raise refuse(name, text, want, "is out of range")
        return number

    def describe(self) -> str:
        return f"{self.unit}{_range(self.low, self.high)}"

    def show(self, value: Any) -> str:
        return f"{value:g}"


@dataclass(frozen=True)
class Duration(Kind):
    """A duration as Prometheus and Alertmanager write it (30s, 5m, 1h30m); kept as text,
    for their configuration files; `duration_seconds` reads it as a number. Above zero
    unless `zero` (valid_duration)."""

    zero: bool = False
    # For Docker and Compose, which read it with Go's time.ParseDuration: no d, w or y.
    docker: bool = False

    def parse(self, name: str, text: str) -> str:
        if not valid_duration(text, zero=self.zero):
            least = "" if self.zero else ", above zero"
            raise refuse(
                name,
                text,
                "write it as Prometheus does, e.g. 30s, 5m or 1h30m: each unit once, "
                f"largest first (y w d h m s ms){least}",
                "is not a duration",
            )
        if self.docker and _DOCKER_REFUSES.search(text):
            raise refuse(
                name,
                text,
                "Docker takes hours, minutes, seconds and milliseconds only (h m s ms): "
                "write 1d as 24h",
                "has a unit Docker does not read",
            )
        return text

    def describe(self) -> str:
        if self.docker:
            return "duration (30s, 5m, 1h; h m s ms only)"
        return "duration (30s, 5m, 1h; 0s allowed)" if self.zero else "duration (30s, 5m, 1h)"


@dataclass(frozen=True)
class Size(Kind):
    """Bytes, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB (kept as text)."""

    def parse(self, name: str, text: str) -> str:
        if not _SIZE.fullmatch(text):
            raise refuse(
                name,
                text,
                "give bytes, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB (e.g. 2GiB)",
                "is not a size",
            )
        return text

    def describe(self) -> str:
        return "size (bytes, 500MB, 2GiB)"


@dataclass(frozen=True)
class Choice(Kind):
    """One of a few words, each with what it does (the docs and the error list them)."""

    values: Mapping[str, str]
    noun: str = "one of its values"
    enum: type[Enum] | None = None
    exact_case: bool = False

    def parse(self, name: str, text: str) -> Any:
        if self.exact_case:
            word = text if text in self.values else None
        else:
            word = {str(key).lower(): key for key in self.values}.get(text.lower())
        if word is None:
            raise refuse(name, text, f"use {self.listed()}", f"is not {self.noun}")
        return self.enum(word) if self.enum else str(word)

    def listed(self) -> str:
        parts = [f"{word} ({what})" if what else word for word, what in self.values.items()]
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"

    def describe(self) -> str:
        words = list(self.values)
        return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]

    def show(self, value: Any) -> str:
        return str(value.value if isinstance(value, Enum) else value)


@dataclass(frozen=True)
class Network(Kind):
    """An IP network (10.0.0.0/8, fd00::/8); an address alone is its own /32 or /128.

    `everything`: whether 0.0.0.0/0 and ::/0, every address, may be given."""

    everything: bool = True

    def parse(self, name: str, text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise refuse(
                name, text, "give a network such as 10.0.0.0/8", "is not a network"
            ) from None
        if network.prefixlen == 0 and not self.everything:
            raise refuse(
                name, text,
                "name only the addresses or networks the trusted machines are in "
                "(203.0.113.7, 10.1.2.0/28)",
                "holds every address",
            )  # fmt: skip
        return network

    def describe(self) -> str:
        return "networks"


@dataclass(frozen=True)
class Address(Kind):
    """An IP address."""

    def parse(self, name: str, text: str) -> str:
        try:
            ipaddress.ip_address(text)
        except ValueError:
            raise refuse(
                name, text, "give an IPv4 or IPv6 address", "is not an IP address"
            ) from None
        return text

    def describe(self) -> str:
        return "IP address"


@dataclass(frozen=True)
class HostName(Kind):
    """A host name (RFC 1123), or also an IP address where `address` is set."""

    address: bool = True

    def parse(self, name: str, text: str) -> str:
        if self.address and not valid_address_or_hostname(text):
            if looks_like_ipv4(text):
                raise refuse(
                    name,
                    text,
                    "give four numbers from 0 to 255 without leading zeros, such as 10.0.0.5",
                    "is not a valid IPv4 address",
                )
            raise refuse(
                name,
                text,
                "give an address such as 10.0.0.5 or a name such as gpu-01.example.org",
                "is neither an IP address nor a host name",
            )
        if not self.address and not valid_hostname(text):
            raise refuse(
                name,
                text,
                "give a host name of letters, digits, hyphens and dots",
                "is not a valid host name",
            )
        return text

    def describe(self) -> str:
        return "address or host name" if self.address else "host name"


@dataclass(frozen=True)
class FilePath(Kind):
    """A file or folder; `~` is the user's home. `absolute` refuses a relative one."""

    absolute: bool = False
    folder: bool = True

    def parse(self, name: str, text: str) -> Path:
        path = Path(text).expanduser()
        if self.absolute and not path.is_absolute():
            raise refuse(name, text, "give an absolute path (starting with /)", "is not absolute")
        return path

    def describe(self) -> str:
        what = "folder" if self.folder else "file"
        return f"absolute {what}" if self.absolute else what


@dataclass(frozen=True)
class Url(Kind):
    """A URL with one of `schemes`; `host` requires a host; `path` allows a path. The value
    is kept without a trailing slash."""

    schemes: tuple[str, ...] = ("http", "https")
    host: bool = True
    path: bool = True
    example: str = ""
    # False where the URL's reader cannot send a user:password (it would only fail later,
    # naming the host as unknown); the refusal never repeats the password.
    credentials: bool = True

    def parse(self, name: str, text: str) -> str:
        example = self.example or f"{self.schemes[0]}://host:port" + ("/path" if self.path else "")
        shape = "<host>:<port>" + ("" if self.path else " and no path")
        want = f"give {' or '.join(s + '://' for s in self.schemes)}{shape} (e.g. {example})"
        parts = urlsplit(text)
        try:
            parts.port  # noqa: B018 (raises ValueError on a bad port)
        except ValueError:
            raise refuse(name, text, want, "has a bad port") from None
        if parts.scheme not in self.schemes or (self.host and not parts.hostname):
            raise refuse(name, text, want, "is not a usable URL")
        if not self.path and (parts.path.strip("/") or parts.query):
            raise refuse(name, text, want, "has a path")
        if not self.credentials and (parts.username or parts.password):
            shown = text.replace(parts.netloc, parts.netloc.rpartition("@")[2])
            raise ValueError(
                f"{name}={shown!r} (its user:password left out here) carries credentials, "
                "which MAC does not send there: give the URL without them, and let a proxy "
                "on the master's side add them."
            )
        return text.rstrip("/")

    def describe(self) -> str:
        return "URL (" + ", ".join(f"{s}://" for s in self.schemes) + ")"


@dataclass(frozen=True)
class ListOf(Kind):
    """Comma-separated items, each read by `item` (blank items are skipped)."""

    item: Kind = field(default_factory=Text)

    def parse(self, name: str, text: str) -> list:
        return [self.item.parse(name, part.strip()) for part in text.split(",") if part.strip()]

    def describe(self) -> str:
        if isinstance(self.item, Choice):
            return f"comma-separated, each {self.item.describe()}"
        if isinstance(self.item, Text) and not self.item.looks_like:
            return "comma-separated values"
        inner = self.item.describe()
        return "comma-separated " + (inner if inner.endswith("s") else f"{inner}s")

    def show(self, value: Any) -> str:
        return ",".join(self.item.show(v) for v in value)


@dataclass(frozen=True)
class Custom(Kind):
    """A value with rules of its own: `reader(name, text)` returns it or raises ValueError
    naming `name`; `what` is how the docs describe it."""

    reader: Callable[[str, str], Any] = field(default=lambda name, text: text)
    what: str = "text"
    shower: Callable[[Any], str] = str
    hidden: bool = False

    @property
    def secret(self) -> bool:  # type: ignore[override]
        return self.hidden

    def parse(self, name: str, text: str) -> Any:
        return self.reader(name, text)

    def describe(self) -> str:
        return self.what

    def show(self, value: Any) -> str:
        return self.shower(value)
