"""Checks between the node and its master: the API answers, and it knows this node."""

from __future__ import annotations

from contract.master_api import MasterClient
from node.checks.base import CheckContext, CheckResult, CheckStatus, config, timeout
from node.config import NodeConfig


def _client(ctx: CheckContext, cfg: NodeConfig) -> MasterClient:
    return MasterClient(cfg.master_url, timeout=timeout(ctx), node_key=cfg.node_key)


def check_master_reachable(ctx: CheckContext) -> CheckResult:
    cfg = config(ctx)
    title = "the master's API answers"
    if not cfg.master_ip:
        return CheckResult("master_reachable", title, CheckStatus.SKIP, "MASTER_IP is not set.")
    url = f"{cfg.master_url}/health"
    reply = _client(ctx, cfg).health()
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
    url = f"{cfg.master_url}/api/v1/self"
    reply = _client(ctx, cfg).self_info()
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


CHECKS = (check_master_reachable, check_node_registered)
