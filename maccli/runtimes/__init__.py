"""Runtimes run MAC's services: Docker Compose where an engine answers, else local processes.

The names below load on first use (PEP 562): the process runtime's launcher
(`python -m maccli.runtimes.launch`) sits beside every supervised service, and
importing every runtime, supervisord's client and rich into each of them cost
about 18 MB of resident memory per service.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from maccli.runtimes.base import Runtime, ServiceSpec, ServiceState
    from maccli.runtimes.select import choose_runtime

__all__ = ["Runtime", "ServiceSpec", "ServiceState", "choose_runtime"]

_HOMES = {
    "Runtime": "maccli.runtimes.base",
    "ServiceSpec": "maccli.runtimes.base",
    "ServiceState": "maccli.runtimes.base",
    "choose_runtime": "maccli.runtimes.select",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
