"""`manage.py prepare_master`: the folders and the secret key the master's processes share.

Loading the settings creates nothing (issue 12), so this command does it, once per
data folder, before migrate: `mac start master` and the master's container run it
first. It is idempotent: a second run keeps the key, so the API, the worker and beat
(which read it at start-up) keep agreeing, and sessions survive restarts.
"""

from __future__ import annotations

import secrets
import stat
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from contract.atomicfile import write_atomically

KEY_MODE = 0o600


class Command(BaseCommand):
    help = "Create the data and static folders and the secret key file (idempotent)."
    # Its own system check (macweb.E001) would refuse to run it: it is the fix.
    requires_system_checks: list[str] = []

    def handle(self, *args, **options) -> None:
        self.verbosity = options["verbosity"]
        self._folder("MAC_DATA_DIR", Path(settings.DATA_DIR))
        self._folder("MAC_STATIC_ROOT", Path(settings.STATIC_ROOT))
        self._secret_key(Path(settings.SECRET_KEY_FILE))

    def _say(self, text: str) -> None:
        if self.verbosity:
            self.stdout.write(text)

    def _folder(self, variable: str, path: Path) -> None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CommandError(
                f"{variable}={path} cannot be created: {exc.strerror or exc}. "
                f"Create it with write access for this user, or set {variable} elsewhere."
            ) from None
        self._say(f"{variable}: {path}")

    def _secret_key(self, path: Path) -> None:
        source = settings.SECRET_KEY_SOURCE
        if source and source != str(path):
            self._say(f"Secret key: from {source} in the environment; no file written.")
            return
        try:
            existing = path.read_text().strip() if path.exists() else ""
        except OSError as exc:
            raise CommandError(f"The secret key file {path} cannot be read: {exc}.") from None
        if existing:
            if stat.S_IMODE(path.stat().st_mode) & 0o077:
                path.chmod(KEY_MODE)  # readable by others: the key signs sessions
                self._say(f"Secret key: kept {path}, mode tightened to 0600.")
            else:
                self._say(f"Secret key: kept {path}.")
            return
        try:
            write_atomically(path, secrets.token_urlsafe(50).encode() + b"\n", mode=KEY_MODE)
        except OSError as exc:
            raise CommandError(f"The secret key file {path} cannot be written: {exc}.") from None
        self._say(f"Secret key: created {path} (mode 0600).")
