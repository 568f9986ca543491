"""`mac env set|get|unset|list`: the per-user and per-node configuration files.

Values that differ per node (NODE_NAME, MASTER_IP, MAC_AGENT_IP, MAC_NODE_KEY, an
address in MAC_BIND) are refused in a per-user file on a network filesystem, because
every node of the cluster would read them. The commands it prints quote the value for
the shell and show a secret's as <value>.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from maccli import output
from maccli.envvalues import UnknownSetting, mask, printable, validate
from maccli.output import CliError
from node.config import (
    SECRET_KEYS,
    ConfigError,
    NodeConfig,
    Source,
    is_per_node,
)
from node.envfile import EnvFileError, write_env_file

# The one per-node value every node may share on purpose (--force): one master for all.
SHAREABLE = frozenset({"MASTER_IP"})


def _split(assignment: str) -> tuple[str, str]:
    key, sep, value = assignment.partition("=")
    if not sep:
        raise CliError(
            f"{assignment!r} is not KEY=VALUE.",
            commands=["mac env set MASTER_IP=<master-ip>"],
        )
    return key.strip(), value.strip()


def _writable_or_error(cfg: NodeConfig, node: bool, command: str) -> None:
    path = cfg.node_file if node else cfg.user_file
    probe = path if path.exists() else path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK) or (path.exists() and not os.access(path.parent, os.W_OK)):
        raise CliError(
            f"cannot write {path}: permission denied.",
            hint="The per-node file belongs to root:" if node else "",
            commands=[f"sudo {command}"],
        )


def _write(path: Path, updates: Mapping[str, str | None]) -> None:
    try:
        write_env_file(path, updates)
    except EnvFileError as exc:  # a value it cannot store, a line that would swallow it
        raise CliError(str(exc), commands=exc.commands) from None


def env_set(assignment: str, node: bool = False, force: bool = False) -> int:
    cfg = NodeConfig.load()
    key, value = _split(assignment)
    try:
        validate(key, value)
    except UnknownSetting as exc:
        meant = [f"mac env set {printable(exc.meant, value)}"] if exc.meant else []
        raise CliError(str(exc), commands=meant) from None
    except ConfigError as exc:
        raise CliError(str(exc), commands=[f"mac env set {key}=<value>"]) from None
    flag = " --node" if node else ""
    if not node and is_per_node(key, value):
        shared, why = cfg.shared_home()
        if shared and (key not in SHAREABLE or not force):
            hint = (
                f"{cfg.user_file} is read by every node of the cluster ({why}). "
                f"Per-node values belong in the per-node file {cfg.node_file}:"
            )
            commands = [f"sudo mac env set --node {printable(key, value)}"]
            if key == "MASTER_IP":
                commands.append(
                    "# or, if every node uses this master: "
                    f"mac env set --force {printable(key, value)}"
                )
            raise CliError(
                f"{key} must not be set in the shared per-user file {cfg.user_file}.",
                hint=hint,
                commands=commands,
            )
        if shared:
            output.warn(f"{key} saved in {cfg.user_file}, which every node reads ({why}).")
    _writable_or_error(cfg, node, f"mac env set{flag} {printable(key, value)}")
    path = cfg.node_file if node else cfg.user_file
    _write(path, {key: value})
    scope = "per-node" if node else "per-user"
    shown = mask(value) if key in SECRET_KEYS else value
    output.ok(f"Saved {key}={shown} to {path} ({scope}).")
    winner = Source.NODE if node else Source.USER
    fresh = NodeConfig.load()
    _, source = fresh.lookup(key)
    if source is not None and source != winner:
        output.warn(f"{key} is also set in the {source}, which takes precedence.")
    elif not node and fresh.node_file_unreadable:
        # The per-node file wins over this one, and this user cannot see what it holds.
        output.warn(
            f"{cfg.node_file} is readable by root only: it may set {key} too, and it takes "
            f"precedence. To see: sudo mac env get {key}"
        )
    return 0


def env_get(key: str) -> int:
    cfg = NodeConfig.load()
    value, _source = cfg.lookup(key)
    if value is None:
        hint = ""
        if cfg.node_file_unreadable:
            hint = f"{cfg.node_file} is readable by root only; it may be set there:"
        raise CliError(
            f"{key} is not set.",
            hint=hint,
            commands=[f"sudo mac env get {key}"] if hint else [f"mac env set {key}=<value>"],
        )
    output.out().print(value, markup=False, highlight=False)
    return 0


def env_unset(key: str, node: bool = False) -> int:
    cfg = NodeConfig.load()
    path = cfg.node_file if node else cfg.user_file
    values = cfg.node_values if node else cfg.user_values
    if node and cfg.node_file_unreadable:
        # Not "nothing to do": the key may well be set in the file this user cannot read.
        raise CliError(
            f"cannot read {path}: permission denied; {key} may be set there.",
            hint="The per-node file belongs to root:",
            commands=[f"sudo mac env unset --node {key}"],
        )
    if key not in values:
        output.say(f"{key} is not set in {path}; nothing to do.")
    else:
        _writable_or_error(cfg, node, f"mac env unset{' --node' if node else ''} {key}")
        _write(path, {key: None})
        output.ok(f"Removed {key} from {path}.")
    fresh = NodeConfig.load()
    value, source = fresh.lookup(key)
    if value is not None and source != Source.DEFAULT:
        shown = mask(value) if key in SECRET_KEYS else value
        output.warn(f"{key}={shown} still comes from the {source}.")
    elif fresh.node_file_unreadable:
        output.warn(
            f"{cfg.node_file} is readable by root only: it may still set {key}. "
            f"To see: sudo mac env get {key}"
        )
    return 0


def env_list(as_json: bool = False) -> int:
    cfg = NodeConfig.load()
    merged = cfg.merged()
    shared, why = cfg.shared_home()

    def shown(key: str, value: str) -> str:
        return mask(value) if key in SECRET_KEYS else value

    if as_json:
        output.out().print_json(
            json.dumps(
                {
                    "values": {
                        k: {"value": shown(k, v), "source": str(s)} for k, (v, s) in merged.items()
                    },
                    "node_file": str(cfg.node_file),
                    "user_file": str(cfg.user_file),
                    "shared_home": shared,
                }
            )
        )
        return 0
    where = {
        Source.NODE: str(cfg.node_file),
        Source.USER: str(cfg.user_file),
        Source.PROCESS: "environment",
        Source.DEFAULT: "default",
    }
    rows = [(key, shown(key, value), where[source]) for key, (value, source) in merged.items()]
    output.table(["KEY", "VALUE", "SOURCE"], rows)
    if cfg.node_file_unreadable:
        output.warn(f"{cfg.node_file} is readable by root only; run `sudo mac env list` to see it.")
    if shared:
        output.say(
            f"Note: {cfg.user_file} is on a shared filesystem ({why}); keep per-node "
            f"values in {cfg.node_file}."
        )
    return 0
