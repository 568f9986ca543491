"""Checks of the node's MAC configuration: MASTER_IP and NODE_NAME, and where they live."""

from __future__ import annotations

from contract.settings.kinds import valid_hostname
from node.checks.base import CheckContext, CheckResult, CheckStatus, config
from node.config import Source


def check_master_ip(ctx: CheckContext) -> CheckResult:
    """MASTER_IP set, and not in a per-user file that every node of the cluster shares."""
    cfg = config(ctx)
    title = "MASTER_IP is set in the right file"
    value, source = cfg.lookup("MASTER_IP")
    if not value:
        return CheckResult(
            "master_ip",
            title,
            CheckStatus.FAIL,
            "MASTER_IP is not set, so `mac start agent` cannot join a master.",
            "mac env set MASTER_IP=<master-ip>\n"
            "# on a shared (NFS) home use the per-node file instead:\n"
            "sudo mac env set --node MASTER_IP=<master-ip>",
        )
    if source == Source.USER:
        shared, why = cfg.shared_home()
        if shared:
            return CheckResult(
                "master_ip",
                title,
                CheckStatus.WARN,
                f"MASTER_IP={value} comes from {cfg.user_file}, which every node sees ({why}).",
                f"sudo mac env set --node MASTER_IP={value}\nmac env unset MASTER_IP",
            )
    where = {Source.NODE: cfg.node_file, Source.USER: cfg.user_file}.get(source, source)
    return CheckResult("master_ip", title, CheckStatus.PASS, f"MASTER_IP={value} ({where})")


def check_node_name(ctx: CheckContext) -> CheckResult:
    """The name the node registers under: not empty, valid, never pinned in a shared home."""
    cfg = config(ctx)
    title = "NODE_NAME resolves to this node's own name"
    name, source = cfg.node_name(ctx.extra.get("hostname"))
    if source == Source.USER:
        shared, why = cfg.shared_home()
        if shared:
            return CheckResult(
                "node_name",
                title,
                CheckStatus.FAIL,
                f"NODE_NAME={name} is pinned in {cfg.user_file}, which every node sees ({why}): "
                "all nodes would register under one name.",
                f"mac env unset NODE_NAME\n# if this node needs a name other than its host name:\n"
                f"sudo mac env set --node NODE_NAME={name}",
            )
    if not name:
        detail = (
            "NODE_NAME is set but empty"
            if source is not None
            else "the host name is empty and NODE_NAME is not set"
        )
        return CheckResult(
            "node_name", title, CheckStatus.FAIL, detail + ".", "mac env set NODE_NAME=<name>"
        )
    if not valid_hostname(name):
        return CheckResult(
            "node_name",
            title,
            CheckStatus.FAIL,
            f"{name!r} is not a valid host name, so the master would refuse it.",
            "mac env set NODE_NAME=<name>",
        )
    origin = f"NODE_NAME ({source})" if source else "the host name"
    return CheckResult("node_name", title, CheckStatus.PASS, f"{name} (from {origin})")


CHECKS = (check_master_ip, check_node_name)
