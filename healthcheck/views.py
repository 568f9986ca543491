"""The master's own /health: 200 when its dependencies answer, 503 naming what failed."""

from __future__ import annotations

from django.http import JsonResponse
from django.views.decorators.http import require_GET

from healthcheck.health import run_health_checks


@require_GET
def health(request):
    report = run_health_checks()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)
