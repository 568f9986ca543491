"""The environment of a `mac` run whose files all lie under one scratch folder."""

from __future__ import annotations

import os
from pathlib import Path

from maccli.master.preflight import PORT_SETTINGS
from node.config import FILE_SETTINGS
from testkit.ports import free_port

REPO = Path(__file__).resolve().parents[1]


def scratch_mac_env(root: Path, keep: tuple[str, ...] = (), **settings: str) -> dict[str, str]:
    """This process's environment without its MAC_* settings (but those in `keep`),
    MASTER_IP and DATABASE_URL, so no run reads the developer's own; HOME, the user
    and node env files, the state folder and SLURM_CONF (no file: a master on a Slurm
    host must not mount the host's cluster) under root; then `settings` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAC_") or k in keep}
    env.pop("MASTER_IP", None)
    env.pop("DATABASE_URL", None)
    env.update(
        {
            "HOME": str(root),
            "MAC_USER_ENV_FILE": str(root / "user.env"),
            "MAC_NODE_ENV_FILE": str(root / "node.env"),
            "MAC_STATE_DIR": str(root / "state"),
            "SLURM_CONF": str(root / "slurm.conf"),
            "PYTHONPATH": str(REPO),
            **settings,
        }
    )
    return env


def free_master_ports() -> dict[str, str]:
    """A free port for each of the master's listeners (maccli.master.preflight.PORT_SETTINGS), so a
    test's master never needs the defaults that a real master on this host may hold."""
    return {name: str(free_port()) for name in PORT_SETTINGS}


def own_files(root: Path) -> dict[str, str]:
    """Each of node.config.FILE_SETTINGS pointing into root: with these, a configuration
    reads none of the machine's own files (/etc/mango/mac/env, ~/.mac/env)."""
    return {name: str(root / name.lower()) for name in FILE_SETTINGS}
