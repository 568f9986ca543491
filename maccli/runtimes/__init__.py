"""Runtimes run MAC's services: Docker Compose where an engine answers, else local processes."""

from __future__ import annotations

from maccli.runtimes.base import Runtime, ServiceSpec, ServiceState
from maccli.runtimes.select import choose_runtime

__all__ = ["Runtime", "ServiceSpec", "ServiceState", "choose_runtime"]
