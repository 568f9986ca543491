"""The master's own /health (200, or 503 naming the failure) and /metrics for Prometheus."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from healthcheck.health import run_health_checks
from healthcheck.metrics import master_registry


@require_GET
def health(request):
    report = run_health_checks()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)


@require_GET
def metrics(request):
    return HttpResponse(generate_latest(master_registry()), content_type=CONTENT_TYPE_LATEST)
