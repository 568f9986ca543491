"""The master's own /health (200, or 503 naming the failure) and /metrics for Prometheus."""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_safe
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from contract.bearer import bearer_matches
from healthcheck.health import run_health_checks
from healthcheck.metrics import master_registry


@require_safe  # HEAD too: load balancers ask with it
def health(request):
    report = run_health_checks(named=_logged_in(request))
    # Degraded (Alertmanager down) is still 200: agents and load balancers keep using it.
    return JsonResponse(report, status=503 if report["status"] == "unhealthy" else 200)


def _logged_in(request) -> bool:
    """A session or an API token (as the API takes them): such a caller may see the
    channels' names. A database that does not answer makes the caller anonymous: /health
    then says so itself, and must not fail on the lookup."""
    try:
        if request.user.is_authenticated:
            return True
        return TokenAuthentication().authenticate(request) is not None
    except (AuthenticationFailed, DatabaseError):
        return False


@require_GET
def metrics(request):
    # Closed by the metrics token (made at the first start): the node list, statuses and
    # diagnoses are in there. Open only while MAC_METRICS_TOKEN=off (or no token at all).
    presented = request.headers.get("Authorization", "")
    if settings.METRICS_TOKEN and not bearer_matches(presented, settings.METRICS_TOKEN):
        response = HttpResponse(
            "/metrics needs 'Authorization: Bearer <MAC_METRICS_TOKEN>'; MAC's own Prometheus "
            "config sends it (manage.py prometheus_config). The master's token is in "
            "MAC_DATA_DIR/metrics_token unless MAC_METRICS_TOKEN sets it.\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="mac-metrics"'
        return response
    return HttpResponse(generate_latest(master_registry()), content_type=CONTENT_TYPE_LATEST)
