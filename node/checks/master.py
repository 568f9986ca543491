"""Checks between the node and its master: the node verifies it, the API answers, and it
knows this node."""

from __future__ import annotations

from contract.master_api import MasterClient, Reply
from contract.pinning import UntrustedMaster
from node.checks.base import CheckContext, CheckResult, CheckStatus, config, timeout
from node.config import CA_PIN_KEY, ConfigError, NodeConfig

JOIN_FIX = (
    "# on the master, `mac start master` prints the join line; on this node:\n"
    "sudo mac env set --node MASTER_URL=https://<master>:28443\n"
    f"sudo mac env set --node {CA_PIN_KEY}=<the pin it printed>\n"
    "sudo mac start agent"
)


def _client(ctx: CheckContext, cfg: NodeConfig) -> MasterClient:
    return MasterClient(
        cfg.master_url, timeout=timeout(ctx), node_key=cfg.node_key, ca_pin=cfg.master_ca_pin
    )


def _untrusted(check_id: str, title: str, exc: UntrustedMaster) -> CheckResult:
    return CheckResult(
        check_id,
        title,
        CheckStatus.FAIL,
        f"{exc}; nothing was sent to it.",
        "# if the master's CA was made again, take the new pin from its join line:\n"
        + JOIN_FIX.split("\n", 1)[1],
    )


def _ask(ctx: CheckContext, cfg: NodeConfig, what: str) -> Reply:
    client = _client(ctx, cfg)
    return client.health() if what == "health" else client.self_info()


def check_master_pinned(ctx: CheckContext) -> CheckResult:
    """Whether this node verifies its master before it sends the join token or its key."""
    cfg = config(ctx)
    title = "this node verifies its master (CA pin)"
    if not cfg.master_ip:
        return CheckResult("master_pinned", title, CheckStatus.SKIP, "MASTER_IP is not set.")
    try:
        pin, url = cfg.master_ca_pin, cfg.master_url
    except ConfigError as exc:
        return CheckResult("master_pinned", title, CheckStatus.FAIL, str(exc), JOIN_FIX)
    if pin:
        return CheckResult(
            "master_pinned",
            title,
            CheckStatus.PASS,
            f"{url}, trusted only with the CA sha256:{pin[:16]}...",
        )
    return CheckResult(
        "master_pinned",
        title,
        CheckStatus.WARN,
        f"{CA_PIN_KEY} is not set: this node cannot tell its master from an impostor, and "
        f"its join token and node key go to {url} "
        + ("in clear." if url.startswith("http://") else "trusting any public CA."),
        JOIN_FIX,
    )


def check_master_reachable(ctx: CheckContext) -> CheckResult:
    cfg = config(ctx)
    title = "the master's API answers"
    if not cfg.master_ip:
        return CheckResult("master_reachable", title, CheckStatus.SKIP, "MASTER_IP is not set.")
    try:
        url = f"{cfg.master_url}/health"
        reply = _ask(ctx, cfg, "health")
    except ConfigError as exc:
        return CheckResult("master_reachable", title, CheckStatus.FAIL, str(exc), JOIN_FIX)
    except UntrustedMaster as exc:
        return _untrusted("master_reachable", title, exc)
    if reply.status == 200:
        return CheckResult("master_reachable", title, CheckStatus.PASS, f"{url} answered 200")
    found = reply.reason() if reply.status else f"no answer: {reply.error}"
    fix = (
        f"curl -m5 {url}\n# open TCP {cfg.master_port} from this node to the master, "
        "and on the master check: mac status master"
    )
    return CheckResult("master_reachable", title, CheckStatus.FAIL, f"{url}: {found}", fix)


def check_node_registered(ctx: CheckContext) -> CheckResult:
    cfg = config(ctx)
    title = "the master knows this node"
    if not cfg.master_ip:
        return CheckResult("node_registered", title, CheckStatus.SKIP, "MASTER_IP is not set.")
    if not cfg.node_key:
        detail = "this node holds no node key, so it never registered"
        if cfg.node_file_unreadable:
            detail = f"{cfg.node_file} is readable by root only; run: sudo mac doctor"
        return CheckResult(
            "node_registered", title, CheckStatus.FAIL, detail + ".", "sudo mac start agent"
        )
    try:
        url = f"{cfg.master_url}/api/v1/self"
        reply = _ask(ctx, cfg, "self")
    except ConfigError as exc:
        return CheckResult("node_registered", title, CheckStatus.FAIL, str(exc), JOIN_FIX)
    except UntrustedMaster as exc:
        return _untrusted("node_registered", title, exc)
    status = reply.status
    if status == 200:
        node = reply.body if isinstance(reply.body, dict) else {}
        state = node.get("status", "?")
        reason = node.get("status_reason") or ""
        detail = f"registered as {node.get('hostname', '?')}: {state}"
        if reason:
            detail += f" ({reason})"
        return CheckResult("node_registered", title, CheckStatus.PASS, detail)
    if status in (403, 404):
        return CheckResult(
            "node_registered",
            title,
            CheckStatus.FAIL,
            f"the master does not accept this node's key (HTTP {status}): the node was "
            "deregistered or its key was reset.",
            "sudo mac start agent",
        )
    if status == 0:
        return CheckResult(
            "node_registered", title, CheckStatus.SKIP, f"the master did not answer: {reply.error}"
        )
    return CheckResult(
        "node_registered",
        title,
        CheckStatus.WARN,
        f"{url} answered HTTP {status}",
        "mac status master   # on the master",
    )


CHECKS = (check_master_pinned, check_master_reachable, check_node_registered)
