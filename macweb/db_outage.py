"""Any request that finds the database down gets a quick 503 "database unavailable".

Why: without it a PostgreSQL outage surfaced as Django's 500 page (or DRF's) after
the connection pool's timeout, so agents retried blindly and load balancers saw
errors that did not say what was wrong. With libpq's connect_timeout and a short pool
timeout (macweb/settings.py) the failure comes within a few seconds, and this
middleware turns it into a 503 with Retry-After that names the cause, for every view
at once (registration, the API, pages, the admin). /health answers on its own
(healthcheck.health), naming the database among its failed checks.
"""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, JsonResponse
from django.utils.deprecation import MiddlewareMixin

from macweb.accesslog import hide_reset_tokens

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5


class DatabaseUnavailableMiddleware(MiddlewareMixin):
    """503 {"detail": "database unavailable: <reason>"} for a lost or refused database."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> JsonResponse | None:
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        reason = str(exception).strip().splitlines()[0] if str(exception).strip() else ""
        path = hide_reset_tokens(request.path)
        log.error("database unavailable during %s %s: %s", request.method, path, reason)
        return JsonResponse(
            {"detail": f"database unavailable: {reason}"[:300]},
            status=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
