"""A real exporter's /metrics page turned into a template whose values are filled per scrape.

One template per (profile, service) is shared by every node of the fleet: its lines
are the real exporter's (names, types, labels, order). Every sample line is
keyed by (metric, owner, extra): the owner is the GPU or NIC the line belongs to
(from its ``gpu``/``gpu_id`` or ``device``/``iface`` label), the extra the ``xid``
label of an XID count, the ``collector`` of MAC's collector gauges or the ``mode``
of node_cpu_seconds_total. At render
time a line takes the model's value for its key, or disappears when the model says
None (an XID not seen yet has no count line) or hides its owner (a GPU fallen off
the bus has no readings); any other line keeps the value the real exporter gave
over the fakes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from testkit.simfleet.hardware import HOST, TOKEN

Owner = tuple[str, int] | None
Key = tuple[str, Owner, str]


def _sample_labels(line: str) -> tuple[str, dict[str, str]]:
    """The sample's name as written (the parser adds _total to DCGM's counters) and labels."""
    family = next(iter(text_string_to_metric_families(line + "\n")))
    return line.split("{", 1)[0].split(" ", 1)[0], family.samples[0].labels


def _owner(labels: Mapping[str, str], nics: Mapping[str, int]) -> Owner:
    for label in ("gpu", "gpu_id"):
        if label in labels and labels[label].isdigit():
            return ("gpu", int(labels[label]))
    for label in ("device", "iface"):
        if labels.get(label) in nics:
            return ("nic", nics[labels[label]])
    return None


@dataclass(frozen=True)
class Line:
    prefix: str  # everything before the value, hostname already a placeholder
    key: Key | None  # None: a comment
    static: str  # the whole line as the real exporter wrote it


class Template:
    """The lines of one exporter's page, keyed for the value model."""

    def __init__(
        self, text: str, nics: Mapping[str, int] | None = None, drop: Collection[str] = ()
    ) -> None:
        nics = nics or {}
        self.lines: list[Line] = []
        for raw in text.splitlines():
            if _family_of(raw) in drop:
                continue  # rendered per node elsewhere (the GPU verdicts)
            if raw.startswith("#") or not raw.strip():
                self.lines.append(Line("", None, raw + "\n"))
                continue
            name, labels = _sample_labels(raw)
            prefix = raw.rsplit(" ", 1)[0] + " "
            extra = labels.get("xid", "") + labels.get("collector", "") + labels.get("mode", "")
            key = (name, _owner(labels, nics), extra)
            self.lines.append(Line(prefix, key, raw + "\n"))
        self.keys = {line.key for line in self.lines if line.key is not None}

    def render(
        self,
        hostname: str,
        values: Mapping[Key, float | None],
        hidden: Collection[Owner] = (),
        token: str = TOKEN,
    ) -> bytes:
        """The page for one node: ``values`` for the keyed lines, ``hidden`` owners dropped.

        A line whose key is missing from ``values`` keeps its recorded value, unless
        its owner is hidden. ``token`` is the node's own part of its GPUs' identities.
        """
        out = []
        append = out.append
        for line in self.lines:
            key = line.key
            if key is None:
                append(line.static)
                continue
            if key in values:
                value = values[key]
                if value is not None:
                    append(f"{line.prefix}{float(value)!r}\n")
            elif key[1] not in hidden:
                append(line.static)
        return "".join(out).replace(HOST, hostname).replace(TOKEN, token).encode()


def _family_of(line: str) -> str:
    """The metric a line is about: its sample name, or the name a HELP or TYPE line gives."""
    if line.startswith("# HELP ") or line.startswith("# TYPE "):
        return line.split(" ", 3)[2]
    return line.split("{", 1)[0].split(" ", 1)[0]
