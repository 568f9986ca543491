"""`manage.py prepare_master`: the folders and the secrets the master's processes share.

Loading the settings creates nothing (issue 12), so this command does it, once per
data folder, before migrate: `mac start master` and the master's container run it
first. It is idempotent: a second run keeps the key, so the API, the worker and beat
(which read it at start-up) keep agreeing, and sessions survive restarts.

The metrics token (issue 22) is made the same way: /metrics and http_sd need it from the
first start, and MAC's Prometheus reads it from the file; MAC_METRICS_TOKEN in the
environment (a site's own token, or `off`) replaces the file.

Last, the installation id (issue 31): the master's records in the cache live under it
(settings.CACHES), so that a master never reads those of another that used the same
Redis before. Under Docker the worker and beat wait for this file, the last one made.
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
    help = (
        "Create the data and static folders, the secret key and metrics token files (idempotent)."
    )
    # Its own system check (macweb.E001) would refuse to run it: it is the fix.
    requires_system_checks: list[str] = []

    def handle(self, *args, **options) -> None:
        self.verbosity = options["verbosity"]
        self._folder("MAC_DATA_DIR", Path(settings.DATA_DIR))
        self._folder("MAC_STATIC_ROOT", Path(settings.STATIC_ROOT))
        self._secret("Secret key", Path(settings.SECRET_KEY_FILE), settings.SECRET_KEY_SOURCE, 50)
        self._secret(
            "Metrics token", Path(settings.METRICS_TOKEN_FILE), settings.METRICS_TOKEN_SOURCE, 32
        )
        self._installation_id(Path(settings.INSTALLATION_ID_FILE))

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

    def _installation_id(self, path: Path) -> None:
        """A random id of this master's installation, kept once made (not a secret)."""
        try:
            if path.exists() and path.read_text().strip():
                self._say(f"Installation id: kept {path}.")
                return
            write_atomically(path, secrets.token_hex(8).encode() + b"\n", mode=0o644)
        except OSError as exc:
            raise CommandError(f"The file {path} cannot be written: {exc}.") from None
        self._say(f"Installation id: created {path}.")

    def _secret(self, what: str, path: Path, source: str, size: int) -> None:
        """A random secret in `path` (mode 0600), kept when there is one already."""
        if source and source != str(path):
            self._say(f"{what}: from {source} in the environment; no file written.")
            return
        try:
            existing = path.read_text().strip() if path.exists() else ""
        except OSError as exc:
            raise CommandError(f"The file {path} cannot be read: {exc}.") from None
        if existing:
            if stat.S_IMODE(path.stat().st_mode) & 0o077:
                path.chmod(KEY_MODE)  # readable by others: it is a secret
                self._say(f"{what}: kept {path}, mode tightened to 0600.")
            else:
                self._say(f"{what}: kept {path}.")
            return
        try:
            write_atomically(path, secrets.token_urlsafe(size).encode() + b"\n", mode=KEY_MODE)
        except OSError as exc:
            raise CommandError(f"The file {path} cannot be written: {exc}.") from None
        self._say(f"{what}: created {path} (mode 0600).")
