"""The registration body of this node, built by the contract's one builder."""

from __future__ import annotations

from contract.master_api import registration_body
from maccli.agent import hardware
from maccli.runtimes import ServiceSpec
from node.config import NodeConfig


def build_payload(
    cfg: NodeConfig, hostname: str, ip: str, specs: list[ServiceSpec], agent_network: str
) -> dict:
    """What POST /api/v1/register gets from this node: its hardware, services, labels, and
    the network mode of the runtime that runs them (maccli.agent.network.reported_network),
    on which the master's diagnosis depends."""
    vendor, count = hardware.gpus(cfg)
    return registration_body(
        hostname,
        ip,
        {spec.name: spec.port for spec in specs if spec.port is not None},
        gpu_vendor=vendor,
        gpu_count=count,
        agent_network=agent_network,
        nics=hardware.nics(cfg),
        labels=cfg.value("MAC_LABELS") or {},
        machine_id=hardware.machine_id(cfg),
    )
