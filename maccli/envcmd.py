"""`mac env set|get|unset|list`: the per-user and per-node configuration files.

Values that differ per node (NODE_NAME, MASTER_IP) are refused in a per-user file
on a network filesystem, because every node of the cluster would read them.
"""

from __future__ import annotations

import json
import os

from maccli import output
from maccli.envvalues import UnknownSetting, mask, validate
from maccli.output import CliError
from node.config import (
    PER_NODE_KEYS,
    SECRET_KEYS,
    ConfigError,
    NodeConfig,
    Source,
)
from node.envfile import write_env_file


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


def env_set(assignment: str, node: bool = False, force: bool = False) -> int:
    cfg = NodeConfig.load()
    key, value = _split(assignment)
    try:
        validate(key, value)
    except UnknownSetting as exc:
        meant = [f"mac env set {exc.meant}={value}"] if exc.meant else []
        raise CliError(str(exc), commands=meant) from None
    except ConfigError as exc:
        raise CliError(str(exc), commands=[f"mac env set {key}=<value>"]) from None
    flag = " --node" if node else ""
    if not node and key in PER_NODE_KEYS:
        shared, why = cfg.shared_home()
        if shared and (key == "NODE_NAME" or not force):
            hint = (
                f"{cfg.user_file} is read by every node of the cluster ({why}). "
                f"Per-node values belong in the per-node file {cfg.node_file}:"
            )
            commands = [f"sudo mac env set --node {key}={value}"]
            if key == "MASTER_IP":
                commands.append(
                    f"# or, if every node uses this master: mac env set --force {key}={value}"
                )
            raise CliError(
                f"{key} must not be set in the shared per-user file {cfg.user_file}.",
                hint=hint,
                commands=commands,
            )
        if shared:
            output.warn(f"{key} saved in {cfg.user_file}, which every node reads ({why}).")
    _writable_or_error(cfg, node, f"mac env set{flag} {key}={value}")
    path = cfg.node_file if node else cfg.user_file
    write_env_file(path, {key: value})
    scope = "per-node" if node else "per-user"
    shown = mask(value) if key in SECRET_KEYS else value
    output.ok(f"Saved {key}={shown} to {path} ({scope}).")
    winner = Source.NODE if node else Source.USER
    fresh = NodeConfig.load()
    _, source = fresh.lookup(key)
    if source is not None and source != winner:
        output.warn(f"{key} is also set in the {source}, which takes precedence.")
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
    if key not in values:
        output.say(f"{key} is not set in {path}; nothing to do.")
    else:
        _writable_or_error(cfg, node, f"mac env unset{' --node' if node else ''} {key}")
        write_env_file(path, {key: None})
        output.ok(f"Removed {key} from {path}.")
    value, source = NodeConfig.load().lookup(key)
    if value is not None and source != Source.DEFAULT:
        output.warn(f"{key}={value} still comes from the {source}.")
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
