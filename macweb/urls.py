"""URL map of the master: API, health, admin, schema and the dashboard."""

from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularSwaggerView

from macweb.api_schema import SchemaView
from macweb.monitoring_gate import monitoring_gate

urlpatterns = [
    path("", include("healthcheck.urls")),
    path("api/v1/", include("inventory.api.urls")),
    path("api/v1/", include("alerting.api.urls")),
    path("api/v1/schema/", SchemaView.as_view(), name="schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    # nginx's auth_request for /prometheus/ and /alertmanager/ (macweb.proxy.GATE_PATH).
    path("auth/monitoring", monitoring_gate, name="monitoring-gate"),
    path("", include("macweb.dashboard.urls")),
]


def not_found(request, exception=None):
    """API clients get JSON for an unknown path too (/api/v1/nodes/abc/), as the schema says."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


handler404 = not_found
