"""System checks for the registration settings: a bad value stops start-up, naming it."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.checks import Error, register

# What DRF's throttles understand: "<count>/<s|sec|second|m|min|minute|h|hour|d|day>".
_RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")


@register()
def check_register_rate(app_configs=None, **kwargs) -> list[Error]:
    rate = settings.REGISTER_RATE
    if isinstance(rate, str) and _RATE.fullmatch(rate):
        return []
    return [
        Error(
            f"MAC_REGISTER_RATE={rate!r} is not a rate.",
            hint="Use <count>/<period>, e.g. 600/min, 20/s or 10000/hour.",
            id="inventory.E001",
        )
    ]
