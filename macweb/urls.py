"""URL map of the master: API, health, admin, schema and the dashboard."""

from django.contrib import admin
from django.core.exceptions import DisallowedHost
from django.http import HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularSwaggerView

from macweb.accounts import PasswordReset
from macweb.api_schema import SchemaView
from macweb.dashboard.jobs import JobReportView
from macweb.monitoring_gate import monitoring_gate
from macweb.nginxconf import GATE_PATH

urlpatterns = [
    path("", include("healthcheck.urls")),
    path("", include("scraping.urls")),
    path("api/v1/", include("inventory.api.urls")),
    path("api/v1/", include("alerting.api.urls")),
    path("api/v1/jobs/<int:job_id>/", JobReportView.as_view(), name="job-report"),
    path("api/v1/schema/", SchemaView.as_view(), name="schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
    # Before Django's own: the reset link is built from MAC_PUBLIC_URL (macweb.accounts).
    path("accounts/password_reset/", PasswordReset.as_view(), name="password_reset"),
    path("accounts/", include("django.contrib.auth.urls")),
    # nginx's auth_request for /prometheus/ and /alertmanager/ (macweb.nginxconf.GATE_PATH).
    path("auth/monitoring", monitoring_gate, name="monitoring-gate"),
    path("", include("macweb.dashboard.urls")),
]


def not_found(request, exception=None):
    """API clients get JSON for an unknown path too (/api/v1/nodes/abc/), as the schema says."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


handler404 = not_found


def bad_request(request, exception=None):
    """A Host the master does not answer to (macweb.hosts) says so and what to do; any
    other bad request is Django's own 400."""
    if not isinstance(exception, DisallowedHost):
        return defaults.bad_request(request, exception)
    host = request.META.get("HTTP_HOST", "")[:200]
    detail = (
        f"This master does not answer to the name {host!r} (the request's Host). If agents "
        "or people reach it by that name or address, add it to MAC_TLS_NAMES (or "
        "MAC_ALLOWED_HOSTS) on the master and restart it (mac restart master)."
    )
    if request.path == GATE_PATH:
        # nginx's auth_request takes only 2xx, 401 and 403 (anything else is its 500):
        # a refusal that says why, shown by the front door (macweb.nginxconf).
        refused = HttpResponse(status=403)
        refused["X-Mac-Gate"] = detail.encode("ascii", "replace").decode()
        return refused
    return JsonResponse({"detail": detail}, status=400)


handler400 = bad_request
