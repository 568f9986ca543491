"""System checks of the master's preparation: a secret key, a data folder, a metrics token.

The settings only read what `manage.py prepare_master` made. When it has not run,
these checks stop `migrate`, `check` and `runserver` with the command to run,
instead of a server that fails at its first login.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.checks import Error, Warning, register

from alerting.bulkheads import SETTINGS, THREAD_HOLDING, VARIABLES

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


# Threads of a worker that no bulkhead may take: /health and an agent's registration.
FREE_THREADS = 2


@register()
def check_bulkheads(app_configs=None, **kwargs) -> list[Warning]:
    """The bulkheads (alerting.bulkheads) leave threads for what must never wait."""
    # The charts wait on Prometheus on the event loop (macweb.asgi), not in a thread.
    holding = {s: n for s, n in SETTINGS.items() if s in THREAD_HOLDING}
    taken = sum(getattr(settings, name) for name in holding.values())
    if settings.API_THREADS - taken >= FREE_THREADS:
        return []
    sizes = ", ".join(
        f"{VARIABLES[service]}={getattr(settings, name)}" for service, name in holding.items()
    )
    return [
        Warning(
            f"The bulkheads ({sizes}) may take {taken} of the {settings.API_THREADS} request "
            f"threads of a worker (MAC_API_THREADS): fewer than {FREE_THREADS} stay free for "
            "/health and the agents while Alertmanager and the broker both hang.",
            hint="Raise MAC_API_THREADS or lower the MAC_BULKHEAD_* settings.",
            id="macweb.W002",
        )
    ]
