"""System checks of the master's preparation: a secret key and a data folder.

The settings only read what `manage.py prepare_master` made. When it has not run,
these checks stop `migrate`, `check` and `runserver` with the command to run,
instead of a server that fails at its first login.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.checks import Error, register

PREPARE = "manage.py prepare_master"


@register()
def check_master_prepared(app_configs=None, **kwargs) -> list[Error]:
    errors = []
    if not settings.SECRET_KEY_SOURCE:
        errors.append(
            Error(
                f"The master has no secret key: {settings.SECRET_KEY_FILE} does not exist "
                "and neither SECRET_KEY nor MAC_SECRET_KEY is set.",
                hint=f"Run `{PREPARE}` once (`mac start master` does), or give every "
                "master process the same MAC_SECRET_KEY.",
                id="macweb.E001",
            )
        )
    if not Path(settings.DATA_DIR).is_dir():
        errors.append(
            Error(
                f"MAC_DATA_DIR={settings.DATA_DIR} does not exist.",
                hint=f"Run `{PREPARE}` (it creates it), or point MAC_DATA_DIR at a folder.",
                id="macweb.E002",
            )
        )
    return errors
