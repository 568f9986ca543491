"""The agent services of the contract: name, port, network and liveness URL.

One table read by the exporters, the mac command and the master's probes, so a
port is written down exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from contract.verdicts import VERDICT_QUERY


class AgentNetwork(StrEnum):
    """How an agent's exporters are reached (MAC_AGENT_NETWORK), reported at registration.

    HOST puts every exporter on the host network: nothing depends on IPv4 forwarding.
    BRIDGE is the guide's original layout: the exporters behind published (DNAT'd)
    ports, nic-exporter alone on the host network (`Service.network` below).
    """

    HOST = "host"
    BRIDGE = "bridge"


@dataclass(frozen=True)
class Service:
    name: str
    port: int
    network: str  # "bridge" or "host" under Docker in bridge mode (AgentNetwork.BRIDGE)
    liveness_path: str
    description: str
    # What the sweep's liveness GET asks beside the path: the GPU exporters answer it with
    # their GPU verdicts only (contract.verdicts), which the master keeps.
    probe_query: str = ""
    gpu_vendor: str = ""  # the GPUs it judges: "nvidia" or "amd"

    @property
    def probe_target(self) -> str:
        """The request target of the liveness GET: the path, and the query when there is one."""
        return (
            f"{self.liveness_path}?{self.probe_query}" if self.probe_query else self.liveness_path
        )


# fmt: off
SERVICES: tuple[Service, ...] = (
    Service("sys-exporter", 29101, "bridge", "/metrics", "CPU, memory, load, disks, network"),
    Service("bmc-agent", 29102, "bridge", "/health", "BMC sensors over IPMI or Redfish"),
    Service("sys-manager", 29103, "bridge", "/health", "the node's own diagnosis"),
    Service("dcgm-exporter", 29150, "bridge", "/metrics", "NVIDIA GPUs through NVML",
            VERDICT_QUERY, "nvidia"),
    Service("rocm-exporter", 29200, "bridge", "/metrics", "AMD GPUs through amdsmi or sysfs",
            VERDICT_QUERY, "amd"),
    Service("sw-exporter", 29300, "bridge", "/metrics", "software versions"),
    Service("nic-exporter", 29500, "host", "/metrics", "RDMA NIC bandwidth"),
    Service("mango-sdk-agent", 28000, "bridge", "/docs", "device inventory API"),
)
# fmt: on
BY_NAME: dict[str, Service] = {service.name: service for service in SERVICES}
# The services whose liveness answer carries GPU verdicts (contract.verdicts).
VERDICT_SERVICES = tuple(service for service in SERVICES if service.probe_query)

SYS_EXPORTER = BY_NAME["sys-exporter"]
NIC_EXPORTER = BY_NAME["nic-exporter"]
MASTER_API_PORT = 28080
# HTTPS of the master's front door, beside MASTER_API_PORT (docs/tls.md).
MASTER_TLS_PORT = 28443
MASTER_PROMETHEUS_PORT = 29090
# In MAC's range, so that a site's own Alertmanager on 9093 is left alone.
MASTER_ALERTMANAGER_PORT = 29093
# The header in which an agent shows the master its per-node key.
NODE_KEY_HEADER = "X-MAC-Node-Key"
