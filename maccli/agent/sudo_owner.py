"""Whose agent a root-only command acts on when run through `sudo` by the agent's owner.

An agent started by a user under the process runtime keeps its state (supervisord, the
pid files, the GPU exporters' evidence) under that user's ~/.mac/state/<host>, and its
settings (ports) in that user's ~/.mac/env. `sudo mac gpu reset` runs as root, whose
folder is /var/lib/mac: left there, it finds none of MAC's GPU services running, stops
nothing, and the reset fails on the exporter it never stopped. So where root runs no agent
of its own and the user sudo names (SUDO_USER) does, the command takes that user's
folder and file, and says so. A MAC_STATE_DIR or MAC_USER_ENV_FILE given on purpose
always wins: nothing is guessed then.
"""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from maccli.agent.specs import ROLE
from node.config import NodeConfig


@dataclass(frozen=True)
class Owner:
    """The user whose agent the command acts on, and where that agent keeps what."""

    user: str
    state_dir: Path
    user_file: Path
    cfg: NodeConfig


def home_of(user: str) -> Path | None:
    """The user's home folder as the password database has it; None for no such user."""
    try:
        return Path(pwd.getpwnam(user).pw_dir)
    except KeyError:
        return None


def has_agent(state_dir: Path) -> bool:
    """Whether an agent was started with this state folder (by either runtime: the process
    runtime's supervisord and pid files, Docker's mount of the GPU evidence, both under it)."""
    return (state_dir / ROLE).is_dir()


def invoking_users_agent(cfg: NodeConfig, environ: Mapping[str, str] = os.environ) -> Owner | None:
    """The agent of the user who ran `sudo`, where a command that runs as root (its caller
    checked) should act on it instead of root's; None where it should not (not under sudo,
    a folder or file chosen on purpose, root runs an agent here, or that user runs none)."""
    user = environ.get("SUDO_USER", "")
    if user in ("", "root"):
        return None
    if (cfg.get("MAC_STATE_DIR") or "").strip() or environ.get("MAC_USER_ENV_FILE"):
        return None
    if has_agent(cfg.state_dir):
        return None
    home = home_of(user)
    if home is None:
        return None
    # The file and folder as `mac` run by that user finds them: its ~/.mac/env, and the
    # MAC_STATE_DIR set there, else node.config's default for a user.
    user_file = home / ".mac" / "env"
    with_their_file = {**environ, "MAC_USER_ENV_FILE": str(user_file)}
    chosen = NodeConfig.load(with_their_file).value("MAC_STATE_DIR")
    state_dir = chosen or home / ".mac" / "state" / (socket.gethostname() or "localhost")
    if not has_agent(state_dir):
        return None
    theirs = NodeConfig.load({**with_their_file, "MAC_STATE_DIR": str(state_dir)})
    return Owner(user, state_dir, user_file, theirs)
