"""The agent of the user who ran `sudo`, where root's own command would miss it.

An agent started by a user under the process runtime keeps its state (supervisord, the
pid files, the GPU exporters' evidence) under that user's ~/.mac/state/<host>, and its
settings (ports) in that user's ~/.mac/env. `sudo mac gpu reset` runs as root, whose
folder is /var/lib/mac: left there, it would find none of MAC's GPU services running,
stop nothing, and fail on the exporter it never stopped. So where root has no agent and
the user sudo names (SUDO_USER) has one, the command stops before anything and names
that agent, with the command that acts on it.

It names it and never takes it over by itself: acting as root on a user's own settings
and folder (paths it would open, files it would write) is the operator's decision, never
a side effect of `sudo mac gpu reset`, which a site may grant users alone.
"""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from maccli.agent.specs import ROLE
from node.config import ConfigError, NodeConfig


@dataclass(frozen=True)
class Owner:
    """The user who ran `sudo`, and where that user's agent keeps its state and settings."""

    user: str
    state_dir: Path
    user_file: Path


def home_of(user: str) -> Path | None:
    """The user's home folder as the password database has it; None for no such user."""
    try:
        return Path(pwd.getpwnam(user).pw_dir)
    except KeyError:
        return None


def has_agent(state_dir: Path) -> bool:
    """Whether an agent was started with this state folder (by either runtime: the process
    runtime's supervisord and pid files, Docker's mount of the GPU evidence, both under it).
    A folder root cannot look into (a home on NFS with root squashed) counts as none."""
    try:
        return (state_dir / ROLE).is_dir()
    except OSError:
        return False


def invoking_users_agent(cfg: NodeConfig, environ: Mapping[str, str] = os.environ) -> Owner | None:
    """The agent of the user who ran `sudo`, where a command run as root (its caller
    checked) would miss it; None where it would not (not under sudo, a folder or file
    chosen on purpose, root has an agent here, or that user has none)."""
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
    # MAC_STATE_DIR set there, else node.config's default.
    user_file = home / ".mac" / "env"
    try:
        chosen = NodeConfig.load({**environ, "MAC_USER_ENV_FILE": str(user_file)}).get(
            "MAC_STATE_DIR"
        )
    except (ConfigError, OSError):
        chosen = None  # a file root cannot read or parse: the default folder, then
    state_dir = _as_the_user(chosen.strip(), home) if chosen and chosen.strip() else None
    state_dir = state_dir or home / ".mac" / "state" / (socket.gethostname() or "localhost")
    if not has_agent(state_dir):
        return None
    return Owner(user, state_dir, user_file)


def _as_the_user(path: str, home: Path) -> Path:
    """`path` with its `~` as that user's (root's HOME is sudo's, never the user's)."""
    if path == "~" or path.startswith("~/"):
        return home / path[2:]
    return Path(path).expanduser()


def acting_as_root_warning(cfg: NodeConfig, command: str) -> str:
    """The warning for `sudo mac <command>` on root's agent where the user who ran sudo
    has the agent here ("" where not): `sudo mac status` would say nothing runs, `sudo mac
    restart agent` would start root's own beside it. Said, not refused: an operator may
    mean root's agent (the first `sudo mac start agent` after a try as a user)."""
    if os.geteuid() != 0:
        return ""
    owner = invoking_users_agent(cfg)
    if owner is None:
        return ""
    return (
        f"root has no MAC agent here; {owner.user}'s agent runs from {owner.state_dir}. "
        f"`sudo mac {command}` acts on root's: for {owner.user}'s, run `mac {command}` as "
        f"{owner.user}, without sudo."
    )
