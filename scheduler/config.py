"""Whether the master talks to Slurm, and how MAC's host names map to Slurm's NodeNames.

Shared by the drain (scheduler.drain) and job attribution: both are on only where
slurm.conf exists at settings.SLURM_CONF (Slurm's own SLURM_CONF, else its default path).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from scheduler.slurm import SlurmClient


def slurm_configured() -> bool:
    """True where this master has a slurm.conf to talk to slurmctld with."""
    return Path(settings.SLURM_CONF).is_file()


def slurm_client(**kwargs) -> SlurmClient:
    """The client of Slurm's tools, aimed at the cluster of settings.SLURM_CONF."""
    return SlurmClient(settings.SLURM_CONF, **kwargs)


def short_name(hostname: str) -> str:
    """Slurm's default NodeName for a host: its name up to the first dot."""
    return hostname.split(".", 1)[0]


@dataclass(frozen=True)
class NodeNameMap:
    """MAC hostname <-> Slurm NodeName: the site's pairs, else the short host name."""

    pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> NodeNameMap:
        """Pairs from "host=NodeName,host2=NodeName2" or "@/path" (one pair a line, # comments)."""
        text = text.strip()
        if text.startswith("@"):
            path = Path(text[1:])
            try:
                text = path.read_text()
            except OSError as exc:
                raise ImproperlyConfigured(
                    f"MAC_SLURM_NODE_MAP: cannot read {path}: {exc.strerror}"
                ) from None
            items = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        else:
            items = [item.strip() for item in text.split(",")]
        pairs = []
        for item in filter(None, items):
            host, sep, node = (part.strip() for part in item.partition("="))
            if not sep or not host or not node:
                raise ImproperlyConfigured(
                    f"MAC_SLURM_NODE_MAP: {item!r} is not hostname=NodeName "
                    "(e.g. MAC_SLURM_NODE_MAP=gpu-01.dc=gpu01,gpu-02.dc=gpu02)."
                )
            pairs.append((host, node))
        return cls(tuple(pairs))

    @classmethod
    def from_settings(cls) -> NodeNameMap:
        return cls.parse(settings.SLURM_NODE_MAP)

    def to_slurm(self, hostname: str) -> str:
        for host, node in self.pairs:
            if host == hostname:
                return node
        return short_name(hostname)
