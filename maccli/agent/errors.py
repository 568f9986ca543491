"""The master's answers that stop an agent command, as errors that say what to do next.

Each maps one kind of Reply (no answer, an unhealthy master, 401/403/409/429 on
registration, a failed deregistration) to the message and commands the operator
runs; the code that talks to the master only decides when to raise them.
"""

from __future__ import annotations

from contract.master_api import Reply
from contract.pinning import UntrustedMaster
from maccli.output import CliError
from node.config import CA_PIN_KEY, NodeConfig


def health_command(cfg: NodeConfig) -> str:
    # Over HTTPS, -k: only whether it answers; `mac` itself checks the CA against the pin.
    insecure = "-k " if cfg.master_url.startswith("https://") else ""
    return f"curl -m5 {insecure}-o /dev/null -w '%{{http_code}}\\n' {cfg.master_url}/health"


def no_route_error(cfg: NodeConfig, exc: OSError) -> CliError:
    return CliError(
        f"could not register with master at {cfg.master_ip}: no route to it ({exc}).",
        hint="Check the address and this node's routes:",
        commands=[f"ip route get {cfg.master_ip}", "mac env get MASTER_IP"],
    )


def unhealthy_master_error(cfg: NodeConfig, reply: Reply) -> CliError:
    reason = reply.reason()
    if reply.status:
        reason = f"the master answers but is not healthy: {reason}"
    return CliError(
        f"could not register with master at {cfg.master_ip}: {reason}",
        hint=f"Confirm the API port {cfg.master_port} is open from this node (this should print "
        "200), then run again:",
        commands=[health_command(cfg), "mac start agent"],
    )


def registration_error(cfg: NodeConfig, reply: Reply) -> CliError:
    prefix = f"could not register with master at {cfg.master_ip}: "
    if reply.status == 401:
        return CliError(
            prefix + f"{reply.reason()}; the master requires a join token.",
            hint="Put the master's MAC_JOIN_TOKEN in the per-node file and run again:",
            commands=["sudo mac env set --node MAC_JOIN_TOKEN=<token>", "sudo mac start agent"],
        )
    if reply.status == 403:
        return CliError(
            prefix + f"{reply.reason()}; this name is registered from another address and "
            "this node's key does not match.",
            hint="If this really is that node, have an admin reset its node key on the master "
            "(admin: Nodes > Reset node key; API: POST /api/v1/nodes/<id>/reset-key), or "
            "give this node another NODE_NAME, then run again:",
            commands=["sudo mac env set --node NODE_NAME=<name>", "sudo mac start agent"],
        )
    if reply.status == 409 and "machine-id differs" in reply.reason():
        return CliError(
            prefix + f"{reply.reason()}.",
            hint="The address the master sees for this node is another node's (nodes behind "
            "one NAT, or a host that replaced it). Give this node its own address and a join "
            "token, or have an admin deregister the other node, then run again:",
            commands=[
                "sudo mac env set --node MAC_AGENT_IP=<this node's own address>",
                "sudo mac env set --node MAC_JOIN_TOKEN=<token>",
                "sudo mac start agent",
            ],
        )
    if reply.status == 429:
        wait = reply.headers.get("retry-after", "a few")
        return CliError(
            prefix + f"{reply.reason()}; the master is busy or full.",
            hint=f"Wait {wait} seconds and run again:",
            commands=["mac start agent"],
        )
    if reply.status == 0:
        return CliError(
            prefix + reply.reason(),
            hint="Confirm the master's API answers from this node, then run again:",
            commands=[health_command(cfg), "mac start agent"],
        )
    return CliError(
        prefix + reply.reason(),
        hint="Fix what the master names, then run again:",
        commands=["mac env list", "mac start agent"],
    )


def untrusted_master_error(exc: UntrustedMaster) -> CliError:
    """The master's CA does not match this node's pin: stop, and say how to tell why."""
    return CliError(
        f"{exc}. Nothing was sent to it: neither the join token nor the node key.",
        hint=(
            "Compare with the pin the master prints (its join line at `mac start master`, "
            "or the command below on the master). If the master's CA was made again (its "
            "data folder was lost), set the new pin; if not, something between this node "
            "and the master answers in its place: do not change the pin."
        ),
        commands=[
            "openssl x509 -in <data folder>/tls/ca.pem -pubkey -noout | openssl pkey -pubin "
            "-outform der | sha256sum   # on the master",
            f"sudo mac env set --node {CA_PIN_KEY}=<pin>",
            "sudo mac start agent",
        ],
    )


def no_master_ip_to_deregister() -> CliError:
    return CliError(
        "MASTER_IP is required to deregister; the services were stopped but the node "
        "stays registered.",
        hint="Set it and run again:",
        commands=["mac env set MASTER_IP=<master-ip>", "mac stop agent"],
    )


def deregistration_error(cfg: NodeConfig, reply: Reply) -> CliError:
    return CliError(
        f"could not deregister from master at {cfg.master_ip}: {reply.reason()}. "
        "The services are stopped, but the node stays registered (the master shows it "
        "Offline).",
        hint="Once the master answers, run again:",
        commands=[health_command(cfg), "mac stop agent"],
    )
