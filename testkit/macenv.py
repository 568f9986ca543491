"""The environment of a `mac` run whose files all lie under one scratch folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def scratch_mac_env(root: Path, keep: tuple[str, ...] = (), **settings: str) -> dict[str, str]:
    """This process's environment without its MAC_* settings (but those in `keep`),
    MASTER_IP and DATABASE_URL, so no run reads the developer's own; HOME, the user
    and node env files and the state folder under root; then `settings` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAC_") or k in keep}
    env.pop("MASTER_IP", None)
    env.pop("DATABASE_URL", None)
    env.update(
        {
            "HOME": str(root),
            "MAC_USER_ENV_FILE": str(root / "user.env"),
            "MAC_NODE_ENV_FILE": str(root / "node.env"),
            "MAC_STATE_DIR": str(root / "state"),
            "PYTHONPATH": str(REPO),
            **settings,
        }
    )
    return env
