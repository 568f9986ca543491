"""System checks of the master's preparation: a secret key, a data folder, a metrics token.

The settings only read what `manage.py prepare_master` made. When it has not run,
these checks stop `migrate`, `check` and `runserver` with the command to run,
instead of a server that fails at its first login.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.checks import Error, Warning, register

PREPARE = "manage.py prepare_master"


@register()
def check_master_prepared(app_configs=None, **kwargs) -> list[Error | Warning]:
    errors: list[Error | Warning] = []
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
    if settings.SECRET_KEY_SOURCE and not settings.METRICS_TOKEN_SOURCE:
        # Open by accident, not by choice (MAC_METRICS_TOKEN=off): issue 22.
        errors.append(
            Warning(
                f"/metrics is open: {settings.METRICS_TOKEN_FILE} does not exist and "
                "MAC_METRICS_TOKEN is not set.",
                hint=f"Run `{PREPARE}` (it makes the token), or set MAC_METRICS_TOKEN=off "
                "to keep /metrics open on purpose.",
                id="macweb.W001",
            )
        )
    return errors
