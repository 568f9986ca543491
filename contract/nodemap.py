"""MAC_SLURM_NODE_MAP: the Slurm NodeName of each of MAC's hosts where it is not the short
host name, read the same way by `mac` and by the master.

The value is ``host=NodeName,host2=NodeName2``, or ``@/absolute/path`` to a file with one
pair a line (``#`` starts a comment). The master's drain and job attribution
(scheduler.config) read it at each pass, the file again each time, so an edited file
applies without a restart; the setting's kind (contract.settings.scheduler) refuses a bad
value when it is written (`mac env set`) and when the master's processes start.

Where the setting is checked is not always where the file is: the master's containers
mount little of the host. So the kind reads the file where it can
(`check_node_map`), and a file it cannot read there is left to the pass, which reads it
strictly (`parse_node_map`) and says what is wrong on /health.
"""

from __future__ import annotations

import re
from pathlib import Path

SETTING = "MAC_SLURM_NODE_MAP"
EXAMPLE = "gpu-01.dc=gpu01,gpu-02.dc=gpu02"
# A host name or a Slurm NodeName: no spaces, commas, equals signs or comment signs.
_NAME = re.compile(r"[^\s,=#]+")


class NodeMapError(ValueError):
    """A MAC_SLURM_NODE_MAP that cannot be used; the message names the setting (and its file)
    and what to give instead."""


def parse_node_map(text: str | None, name: str = SETTING) -> dict[str, str]:
    """{host: NodeName} written in `text` (empty: none, every host its short name); an
    ``@file`` is read now. NodeMapError naming `name` when it cannot be used."""
    text = (text or "").strip()
    if not text.startswith("@"):
        return _pairs(text.split(","), text, name, "")
    path = _path(text, name)
    try:
        content = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NodeMapError(
            f"{name}={text!r}: cannot read {path} ({exc.strerror or exc}): make it readable "
            f"by the master's services, or give the pairs themselves ({name}={EXAMPLE})."
        ) from None
    except UnicodeDecodeError:
        raise NodeMapError(
            f"{name}={text!r}: {path} is not text: give one hostname=NodeName a line."
        ) from None
    return _pairs(content.splitlines(), text, name, f"{path} line ")


def check_node_map(text: str | None, name: str = SETTING) -> str:
    """`text` as written, once it is a value of the setting: the pairs, or an absolute
    ``@file`` whose pairs are right where this process can read it (the master's
    containers may not see a file of the host: the pass reads it again, parse_node_map)."""
    text = (text or "").strip()
    if text.startswith("@"):
        path = _path(text, name)
        try:
            content = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return text  # not readable here: the pass says so where it runs
        _pairs(content.splitlines(), text, name, f"{path} line ")
        return text
    _pairs(text.split(","), text, name, "")
    return text


def map_file(text: str | None) -> Path | None:
    """The file a value names (``@/absolute/path``); None for pairs, or for a path the
    setting refuses (the refusal is the setting's to say)."""
    text = (text or "").strip()
    if not text.startswith("@"):
        return None
    try:
        return _path(text, SETTING)
    except NodeMapError:
        return None


def _path(text: str, name: str) -> Path:
    path = Path(text[1:].strip())
    if not path.is_absolute():
        raise NodeMapError(
            f"{name}={text!r} is not an absolute path: give @/path/to/file (the master's "
            "services do not run in this folder)."
        )
    return path


def _pairs(items: list[str], text: str, name: str, line: str) -> dict[str, str]:
    """The pairs of `items` (the value's comma-separated items, or a file's lines, `line`
    naming the file): every host once, each item `host=NodeName`."""
    found: dict[str, str] = {}
    for number, raw in enumerate(items, 1):
        item = raw.split("#", 1)[0].strip() if line else raw.strip()
        if not item:
            continue
        host, sep, node = (part.strip() for part in item.partition("="))
        host = host.lower()  # as MAC stores host names; a NodeName keeps its case
        where = f"{line}{number}: " if line else ""
        if not (sep and _NAME.fullmatch(host) and _NAME.fullmatch(node)):
            raise NodeMapError(
                f"{name}={text!r}: {where}{item!r} is not hostname=NodeName: give "
                f"{'one pair a line, e.g. gpu-01.dc=gpu01' if line else f'e.g. {EXAMPLE}'}."
            )
        if found.setdefault(host, node) != node:
            raise NodeMapError(
                f"{name}={text!r}: {where}{host} is given twice, as {found[host]} and as "
                f"{node}: keep the one that is its NodeName in slurm.conf."
            )
    return found
