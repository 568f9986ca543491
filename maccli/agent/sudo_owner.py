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
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from maccli.agent.specs import ROLE
from node.config import NodeConfig
from node.envfile import parse_env_text


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


def uid_of(user: str) -> int | None:
    """The user's uid as the password database has it; None for no such user."""
    try:
        return pwd.getpwnam(user).pw_uid
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
    chosen = users_setting(user_file, user, "MAC_STATE_DIR")
    state_dir = _as_the_user(chosen, home) if chosen else None
    state_dir = state_dir or home / ".mac" / "state" / (socket.gethostname() or "localhost")
    if not has_agent(state_dir):
        return None
    return Owner(user, state_dir, user_file)


# Far more than any env file holds: a bigger one is not read.
USER_FILE_LIMIT = 64 * 1024


def users_setting(path: Path, user: str, key: str) -> str:
    """`key` as the user's own env file sets it, read by root with care: only a regular
    file of that user's, not through a link, at most USER_FILE_LIMIT bytes, never waiting
    (a FIFO); "" for anything else, an unset key or text that is not UTF-8. Anything more
    trusting lets the user point root at what root alone may read, or hang it."""
    uid = uid_of(user)
    if uid is None:
        return ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != uid:
            return ""
        data = os.read(fd, USER_FILE_LIMIT + 1)
    except OSError:
        return ""
    finally:
        os.close(fd)
    if len(data) > USER_FILE_LIMIT:
        return ""
    try:
        return parse_env_text(data.decode("utf-8")).get(key, "").strip()
    except UnicodeDecodeError:
        return ""


def _as_the_user(path: str, home: Path) -> Path:
    """`path` with its `~` as that user's (root's HOME is sudo's, never the user's)."""
    if path == "~" or path.startswith("~/"):
        return home / path[2:]
    return Path(path).expanduser()


def users_agent_for_root(cfg: NodeConfig) -> Owner | None:
    """invoking_users_agent, where this command runs as root (`sudo -u` another user
    has no such question)."""
    return invoking_users_agent(cfg) if os.geteuid() == 0 else None


def acting_as_root_warning(cfg: NodeConfig, command: str) -> str:
    """The warning for `sudo mac <command>` on root's agent where the user who ran sudo
    has the agent here ("" where not): `sudo mac status` would say nothing runs, `sudo mac
    restart agent` would start root's own beside it. Said, not refused: an operator may
    mean root's agent (the first `sudo mac start agent` after a try as a user)."""
    owner = users_agent_for_root(cfg)
    if owner is None:
        return ""
    return (
        f"root has no MAC agent here; {owner.user}'s agent runs from {owner.state_dir}. "
        f"`sudo mac {command}` acts on root's: for {owner.user}'s, run `mac {command}` as "
        f"{owner.user}, without sudo."
    )
