"""Configuration that must be right before `mac start agent` starts anything.

Each guard raises a CliError that names the setting at fault and the command that
fixes it, so a wrong MASTER_IP or a NODE_NAME shared by every node of an NFS home
is caught before a service runs or a registration is sent.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from contract.settings.kinds import valid_hostname
from maccli import output
from maccli.output import CliError
from node.config import MASTER_URL_KEY, ConfigError, NodeConfig, Source


def needs_root(cfg: NodeConfig) -> bool:
    """Whether `mac start agent` must run as root here, and under sudo, whose HOME is
    root's, so that this user's ~/.mac/env is not read: the node key goes to the per-node
    file, which this user cannot write (or this is sudo already)."""
    under_sudo = os.geteuid() == 0 and bool(os.environ.get("SUDO_USER"))
    return os.geteuid() != 0 or under_sudo or not _can_write(cfg.node_file)


def require_master_ip(cfg: NodeConfig) -> str:
    if cfg.master_ip:
        return cfg.master_ip
    if needs_root(cfg):
        # The guide's per-user route dead-ends here: `mac start agent` stops at the root-only
        # per-node file, and `sudo mac start agent` does not read ~/.mac/env.
        raise CliError(
            "MASTER_IP is required.",
            hint=f"Set it in the per-node file {cfg.node_file} (read under sudo, where "
            f"~/.mac/env is root's) and run again as root:",
            commands=["sudo mac env set --node MASTER_IP=<master-ip>", "sudo mac start agent"],
        )
    raise CliError(
        "MASTER_IP is required.",
        hint="Set it (saved to ~/.mac/env) and run again:",
        commands=[
            "mac env set MASTER_IP=<master-ip>",
            "mac start agent",
            "# on a shared (NFS) home, use the per-node file /etc/mango/mac/env instead:",
            "sudo mac env set --node MASTER_IP=<master-ip>",
        ],
    )


def resolve_node_name(cfg: NodeConfig) -> str:
    name, source = cfg.node_name()
    if source == Source.USER:
        shared, why = cfg.shared_home()
        if shared:
            raise CliError(
                f"NODE_NAME={name} is pinned in {cfg.user_file}, which every node reads ({why}); "
                "all nodes would register under one name.",
                hint=f"Remove it (the host name is used), or pin it in the per-node file "
                f"{cfg.node_file}:",
                commands=["mac env unset NODE_NAME", f"sudo mac env set --node NODE_NAME={name}"],
            )
    if not name:
        why = "NODE_NAME is set but empty" if source else "the host name is empty"
        raise CliError(
            f"NODE_NAME is empty ({why}), so this node has no name to register under.",
            hint="Set it explicitly and run again:",
            commands=["mac env set NODE_NAME=<name>", "mac start agent"],
        )
    if not valid_hostname(name):
        raise CliError(
            f"{name!r} is not a valid node name (RFC 1123: letters, digits, hyphens, dots).",
            hint="Set a valid one and run again:",
            commands=["mac env set NODE_NAME=<name>", "mac start agent"],
        )
    return name


def warn_shared_master_ip(cfg: NodeConfig) -> None:
    if cfg.source_of("MASTER_IP") == Source.USER:
        shared, why = cfg.shared_home()
        if shared:
            output.warn(
                f"MASTER_IP comes from {cfg.user_file}, which every node reads ({why}). "
                f"Per-node values belong in {cfg.node_file}: "
                f"sudo mac env set --node MASTER_IP={cfg.master_ip}"
            )


def _can_write(path: Path) -> bool:
    if path.exists():
        return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    probe = path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return os.access(probe, os.W_OK)


def require_node_file_writable(cfg: NodeConfig) -> None:
    if not _can_write(cfg.node_file):
        # sudo gives root's HOME, so `sudo mac start agent` reads /root/.mac/env, not this
        # user's file: a MASTER_IP saved only there would be "required" again under sudo.
        hint = f"Run it as root. The values in {cfg.user_file} are not read under sudo"
        commands = ["sudo mac start agent"]
        # Where the master's address comes from; from the environment, sudo drops it too.
        key = "MASTER_IP" if cfg.get("MASTER_IP") else MASTER_URL_KEY
        if cfg.source_of(key) in (Source.USER, Source.PROCESS):
            hint += f" (nor is this shell's environment); save {key} in the per-node file first:"
            assignment = shlex.quote(f"{key}={cfg.get(key)}")
            commands.insert(0, f"sudo mac env set --node {assignment}")
        else:
            hint += " (keep what root needs in the per-node file: sudo mac env set --node):"
        raise CliError(
            f"the node key must be kept in {cfg.node_file}, which only root can write.",
            hint=hint,
            commands=commands,
        )


def require_valid_master_port(cfg: NodeConfig) -> None:
    try:
        cfg.master_port  # noqa: B018 (validates MAC_MASTER_PORT before anything starts)
    except ConfigError as exc:
        raise CliError(str(exc), commands=["mac env list"]) from None
