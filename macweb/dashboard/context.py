"""What pages need to know of the front door: whether it serves MAC's Alertmanager's API."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def monitoring_links(request: HttpRequest) -> dict[str, bool]:
    # /alertmanager/ is MAC's own Alertmanager; a site's own is not served by the proxy.
    return {"serves_alertmanager": settings.ALERTMANAGER_MANAGED}
