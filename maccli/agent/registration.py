"""The agent's conversation with its master: /health, register, deregister and self.

All of it goes through the contract's MasterClient (contract.master_api), leaving
from the address the node reports, so the master sees the same address whether or
not a join token lets it trust the claimed one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from contract.master_api import MasterClient, Reply, route_address
from contract.pinning import UntrustedMaster
from maccli import output
from maccli.agent import errors
from maccli.agent.payload import build_payload
from maccli.output import CliError
from maccli.runtimes import ServiceSpec
from node.config import NODE_KEY, NodeConfig
from node.envfile import write_env_file


def client(cfg: NodeConfig, source_ip: str | None = None, timeout: float = 10.0) -> MasterClient:
    return MasterClient(
        cfg.master_url,
        timeout=cfg.value("MAC_MASTER_TIMEOUT") or timeout,
        join_token=cfg.join_token,
        node_key=cfg.node_key,
        source_ip=source_ip,
        ca_pin=cfg.master_ca_pin,
    )


def agent_ip(cfg: NodeConfig) -> str:
    """MAC_AGENT_IP, else this node's address on the route to the master."""
    explicit = cfg.value("MAC_AGENT_IP")
    if explicit:
        return explicit
    try:
        return route_address(cfg.master_ip, cfg.master_port)
    except OSError as exc:
        raise errors.no_route_error(cfg, exc) from None


def check_master(cfg: NodeConfig, master: MasterClient) -> None:
    """Return when the master can take a registration; CliError otherwise."""
    with output.spinner(f"Checking {cfg.master_url}/health ..."):
        reply = master.health()
    if reply.status == 200:
        return
    if _only_sweeps_failing(reply):
        # The API and its database answer, so registration works; the node will be
        # probed as soon as the master's worker and beat (or a chunk queue's consumer)
        # run again.
        output.warn(
            "the master answers, but its sweeps have stopped (worker or beat down, or a "
            "probe queue nobody consumes); registering anyway. On the master: "
            "mac status master, curl .../health"
        )
        return
    raise errors.unhealthy_master_error(cfg, reply)


# /health checks that fail when sweeps stop, while the API and its database still work.
SWEEP_CHECKS = {"sweeps", "queues"}


def _only_sweeps_failing(reply: Reply) -> bool:
    body = reply.body if isinstance(reply.body, dict) else {}
    failed = body.get("failed")
    return reply.status == 503 and bool(failed) and set(failed) <= SWEEP_CHECKS


def register(
    cfg: NodeConfig, hostname: str, ip: str, specs: list[ServiceSpec], agent_network: str
) -> dict:
    """Register (or re-register) this node; its node key goes to the per-node file."""
    master = client(cfg, source_ip=ip)
    payload = build_payload(cfg, hostname, ip, specs, agent_network)
    with output.spinner(f"Registering {hostname} ({ip}) with {cfg.master_url} ..."):
        reply = register_with_retry(master, payload)
    if not reply.ok or not isinstance(reply.body, dict):
        raise errors.registration_error(cfg, reply)
    key = reply.body.get("node_key")
    if key:
        write_env_file(cfg.node_file, {NODE_KEY: key})
    elif not cfg.node_key:
        # The master gives a node its key once, in the first answer: that answer never
        # reached this node (a timeout, a restart in between), and no retry brings it.
        output.warn(
            f"The master knows {reply.body.get('hostname', hostname)} but sent no node key, "
            "and this node holds none: the answer that carried it was lost. Until an admin "
            "resets the node's key (admin: Nodes > Reset node key; API: POST "
            "/api/v1/nodes/<id>/reset-key) and "
            "`mac start agent` runs again here, this node cannot deregister itself "
            "(mac stop agent) and its reports to the master are refused."
        )
    return reply.body


# A master that answers 429 or 503 with Retry-After (agents past the proxy's caps, the
# API server or its database restarting) is asked again after that many seconds plus
# up to as many again at random, so that agents told to wait together do not all come
# back together; for at most this long in all. A longer wait (a full inventory answers
# Retry-After: 300) ends the command at once with the master's answer.
REGISTER_RETRY_SECONDS = 120.0
RETRY_STATUSES = (429, 503)


def retry_after(reply: Reply) -> float | None:
    """The seconds the master asked the agent to wait before retrying, or None."""
    if reply.status not in RETRY_STATUSES:
        return None
    value = reply.headers.get("retry-after", "").strip()
    return float(value) if value.isdigit() else None


def register_with_retry(
    master: MasterClient,
    payload: dict,
    *,
    retry_for: float = REGISTER_RETRY_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = random.random,
) -> Reply:
    """POST the registration, again while the master says when to and time is left."""
    deadline = time.monotonic() + retry_for
    while True:
        reply = master.register(payload)
        wait = retry_after(reply)
        if wait is None:
            return reply
        wait = max(wait, 1.0) * (1.0 + jitter())
        if time.monotonic() + wait > deadline:
            return reply
        sleep(wait)


def deregister(cfg: NodeConfig, hostname: str) -> tuple[bool, CliError | None, str]:
    """(whether the node key is spent, the problem if not, the line that says it was
    removed or "").

    The key is spent when the master removed the node, or when no node holds it any more.
    The problem and the line are returned, not raised or printed: the services stop
    either way, and the line that says the node is gone comes after them.
    """
    if not cfg.node_key:
        output.say("This node holds no node key: there is no registration to remove.")
        return False, None, ""
    if not cfg.master_ip:
        return False, errors.no_master_ip_to_deregister(), ""
    master = client(cfg, timeout=5)
    with output.spinner(f"Deregistering {hostname} from {cfg.master_url} ..."):
        try:
            # The name the master knows, in case NODE_NAME changed since the registration.
            reply = known = master.self_info()
            if known.ok and isinstance(known.body, dict) and known.body.get("hostname"):
                hostname = known.body["hostname"]
            if known.status != 0:
                reply = master.deregister(hostname)
        except UntrustedMaster as exc:
            return False, errors.untrusted_master_error(exc), ""
    if reply.ok:
        return True, None, f"Deregistered {hostname} from master {cfg.master_ip}."
    if reply.status == 404:
        # The master answers 404 for a key no node holds, whatever the name: it never
        # says whether a name is registered. Either way this key opens nothing now.
        output.warn(
            f"The master holds no node with this node's key: nothing deregistered. If "
            f"{hostname} is still listed there (an admin reset its key), it shows Offline "
            "from now on: an admin removes it in the admin."
        )
        return True, None, ""
    return False, errors.deregistration_error(cfg, reply), ""


def forget_registration(cfg: NodeConfig) -> None:
    """Drop the node key once the master no longer knows this node."""
    write_env_file(cfg.node_file, {NODE_KEY: None})


def master_view(cfg: NodeConfig) -> tuple[str, dict | None]:
    """One line on what the master says of this node, and the node JSON when it answered."""
    if not cfg.master_ip:
        return "Master: MASTER_IP is not set (mac env set MASTER_IP=<master-ip>).", None
    if not cfg.node_key:
        return f"Master {cfg.master_ip}: this node is not registered (run: mac start agent).", None
    try:
        reply = client(cfg, timeout=5).self_info()
    except UntrustedMaster as exc:
        return f"Master {cfg.master_ip}: not trusted: {exc}.", None
    if reply.ok and isinstance(reply.body, dict):
        node = reply.body
        line = (
            f"Master {cfg.master_ip}: {node.get('hostname')} ({node.get('ip')}) is "
            f"{str(node.get('status', '?')).capitalize()}"
        )
        reason = node.get("status_detail") or node.get("status_reason")
        if reason:
            line += f" ({reason})"
        if node.get("diagnosis"):
            line += f"; diagnosis: {node['diagnosis']}"
        if node.get("last_seen"):
            line += f"; last seen {node['last_seen']}"
        return line, node
    if reply.status in (403, 404):
        return (
            f"Master {cfg.master_ip}: does not know this node's key ({reply.reason()}); "
            "run: sudo mac start agent",
            None,
        )
    return f"Master {cfg.master_ip}: no answer ({reply.reason()}).", None
