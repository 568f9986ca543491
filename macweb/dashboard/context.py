"""What every page's header needs to know: which monitoring servers the front door serves."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def monitoring_links(request: HttpRequest) -> dict[str, bool]:
    # /alertmanager/ is MAC's own Alertmanager; a site's own is not served by the proxy.
    return {"serves_alertmanager": settings.ALERTMANAGER_MANAGED}
