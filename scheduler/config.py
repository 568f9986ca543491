"""Whether the master talks to Slurm, and how MAC's host names map to Slurm's NodeNames.

Shared by the drain (scheduler.drain) and job attribution: both are on only where
slurm.conf exists at settings.SLURM_CONF (Slurm's own SLURM_CONF, else its default path).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from contract.nodemap import NodeMapError, parse_node_map
from scheduler.slurm import SlurmClient

# Where the pass keeps why MAC_SLURM_NODE_MAP could not be read, for /health; and for how
# many probe intervals without a pass that meets it again.
NODE_MAP_ERROR_KEY = "scheduler:slurm:node-map-error"
NODE_MAP_ERROR_PASSES = 10


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
    """MAC hostname -> Slurm NodeName: the site's pairs (contract.nodemap), else the short
    host name. A dict: a map file of 10,000 lines is looked up once per node and pass."""

    names: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> NodeNameMap:
        """The map MAC_SLURM_NODE_MAP's `text` gives: pairs, or "@/path" read now."""
        try:
            return cls(parse_node_map(text))
        except NodeMapError as exc:
            raise ImproperlyConfigured(str(exc)) from None

    @classmethod
    def from_settings(cls) -> NodeNameMap:
        """The map as the setting gives it now (an @file read again at each pass, so an edit
        applies without a restart). A map that cannot be read is kept for /health
        (scheduler.health) until a pass reads it again, and raised as ImproperlyConfigured."""
        try:
            names = cls.parse(settings.SLURM_NODE_MAP)
        except ImproperlyConfigured as exc:
            said = cache.get(NODE_MAP_ERROR_KEY) or {}
            since = said.get("since") or time.time()
            # Kept while passes fail; gone once nothing reads the map (the drain off and no
            # slurm.conf): an error nobody meets any more is not news.
            timeout = NODE_MAP_ERROR_PASSES * settings.PROBE_INTERVAL
            cache.set(NODE_MAP_ERROR_KEY, {"error": str(exc), "since": since}, timeout)
            raise
        cache.delete(NODE_MAP_ERROR_KEY)
        return names

    def to_slurm(self, hostname: str) -> str:
        return self.names.get(hostname.lower()) or short_name(hostname)


def node_map_error() -> dict | None:
    """{"error", "since"} of the map the last pass could not read; None while it reads."""
    return cache.get(NODE_MAP_ERROR_KEY)
