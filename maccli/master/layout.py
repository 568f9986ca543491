"""Where the master's services run and how they reach each other: one Layout that
master_specs (specs.py) reads for every path, address and port it writes into a
command line, so that one description serves both runtimes.

- process_layout: this host's loopback and the master's data folder (the process
  runtime runs the specs as they are);
- docker_layout: the master's Compose network, where services reach each other by
  name, listen on every address of their container on fixed ports (the host's ports
  are the published ones), and keep their files in Compose's volumes (compose.py
  writes docker/docker-compose.master.yml from the specs).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from contract.services import (
    MASTER_ALERTMANAGER_PORT,
    MASTER_API_PORT,
    MASTER_PROMETHEUS_PORT,
    MASTER_TLS_PORT,
)
from maccli.master.preflight import (
    LOOPBACK,
    alertmanager_port,
    api_internal_port,
    data_dir,
    probe_host,
    prometheus_port,
    public_url,
    tls_dir,
    tls_port,
)
from node.config import NodeConfig

# Inside the containers: the volumes' mount points.
DOCKER_DATA = Path("/var/lib/mac")
DOCKER_TLS = Path("/var/lib/mac-tls")
DOCKER_TARGETS = Path("/var/lib/mac-targets")
DOCKER_ALERTMANAGER = Path("/var/lib/mac-alertmanager")
DOCKER_STORE_DATA = Path("/var/lib/mac-metrics")
# The master's data folder's volume (Compose's name; the engine's is mac_mac-data).
DATA_VOLUME = "mac-data"
# mac-redis on the Compose network: the broker and the Channels layer.
DOCKER_REDIS_URL = "redis://redis:6379/0"
# The front door's links in the containers: Compose substitutes what `mac` passes
# (MAC_PUBLIC_URL, derived from this host's address), or this for a bare `up`.
DOCKER_PUBLIC_URL = "${MAC_PUBLIC_URL:-http://localhost:28080}"


@dataclass(frozen=True)
class Layout:
    """The places of one runtime's master: folders as the services see them, the
    address they listen on, how they reach each other, and each server's port."""

    docker: bool
    python: str  # the interpreter of the services' own commands (manage.py ...)
    data: Path  # MAC_DATA_DIR
    tls: Path  # the proxy's CA and certificates (MAC_TLS_DIR)
    listen: str  # the address the master's servers listen on
    # The front door as the master's own servers reach it (a name on its certificate).
    front: str
    public_url: str  # the front door as people reach it: the servers' links
    api_port: int  # the API server's own port, behind the proxy
    http_port: int  # the front door's HTTP
    https_port: int  # the front door's HTTPS
    prometheus_port: int  # Prometheus's, or the targets view's in scale-out mode
    alertmanager_port: int
    alertmanager_url: str  # where alerts go: MAC's Alertmanager or the site's
    alertmanager_dir: Path  # alertmanager.yml, written from the notification channels
    store_data: Path  # scale-out mode's store

    @property
    def work(self) -> Path:
        """Scale-out mode's folder: the engines' configuration, rules and buffers."""
        return self.data / "scaleout"

    @property
    def views_port(self) -> int:
        return self.prometheus_port

    @property
    def master(self) -> str:
        """HOST:PORT of the master's /metrics, for scale-out's scraper 0."""
        return f"{self.host('api-server')}:{self.api_port}" if self.docker else self.front_http

    @property
    def front_http(self) -> str:
        return f"{self.front}:{self.http_port}"

    def django(self, command: str, *args: str) -> list[str]:
        """A start step: one of the master's Django commands, as its services run them."""
        return [self.python, "-m", "django", command, *args]

    def host(self, service: str) -> str:
        """How the other services reach `service`."""
        return service if self.docker else LOOPBACK


def process_layout(cfg: NodeConfig) -> Layout:
    """This host's loopback, the master's data folder."""
    data = data_dir(cfg)
    site_alertmanager = cfg.get("MAC_ALERTMANAGER_URL")
    return Layout(
        docker=False,
        python=sys.executable,
        data=data,
        tls=tls_dir(cfg),
        listen=LOOPBACK,
        front=probe_host(cfg),
        public_url=public_url(cfg),
        api_port=api_internal_port(cfg),
        http_port=cfg.master_port,
        https_port=tls_port(cfg),
        prometheus_port=prometheus_port(cfg),
        alertmanager_port=alertmanager_port(cfg),
        alertmanager_url=site_alertmanager or f"http://{LOOPBACK}:{alertmanager_port(cfg)}",
        alertmanager_dir=Path(cfg.get("MAC_ALERTMANAGER_DIR") or data / "alertmanager"),
        store_data=data / "scaleout" / "store",
    )


def docker_layout(cfg: NodeConfig) -> Layout:
    """The master's Compose network: service names, every address of a container, the
    contract's ports inside each container."""
    return Layout(
        docker=True,
        python="python",
        data=DOCKER_DATA,
        tls=DOCKER_TLS,
        listen="0.0.0.0",
        front="mac-proxy",  # prepare_tls puts it on the certificate
        public_url=DOCKER_PUBLIC_URL,
        api_port=MASTER_API_PORT,
        http_port=MASTER_API_PORT,
        https_port=MASTER_TLS_PORT,
        prometheus_port=MASTER_PROMETHEUS_PORT,
        alertmanager_port=MASTER_ALERTMANAGER_PORT,
        alertmanager_url=cfg.get("MAC_ALERTMANAGER_URL")
        or f"http://mac-alertmanager:{MASTER_ALERTMANAGER_PORT}",
        alertmanager_dir=DOCKER_ALERTMANAGER,
        store_data=DOCKER_STORE_DATA,
    )


def master_layout(cfg: NodeConfig, *, own_network: bool = False) -> Layout:
    """The Compose network where the runtime gives the services a network of their own,
    else this host's loopback."""
    return docker_layout(cfg) if own_network else process_layout(cfg)
