"""Who may use Prometheus and Alertmanager through the front door (issue 22).

Both servers listen on the master's loopback (or its Compose network) and have no
accounts of their own. nginx serves them under /prometheus/ and /alertmanager/ and
asks this view about every request first (`auth_request`, macweb.proxy), passing the
path as it normalised it and the client's method. The answer is 204 (pass), 401 (no
one is logged in) or 403 with the reason in `X-Mac-Gate`, which nginx shows.

- Reading needs a logged-in user: a session (the dashboard's login) or an API token
  (`Authorization: Bearer <token>` or DRF's `Token <token>`), as a site's Grafana
  sends it. Prometheus's query endpoints are reads in either method (Grafana POSTs
  its queries).
- Writing to Alertmanager (silences, posting alerts) and reading its status, which
  holds the generated configuration with the channels' secrets, need the permission
  `alerting.manage_alertmanager` (superusers have it; the admin grants it).
- Prometheus has nothing to write, and the lifecycle endpoints of both (`/-/quit`,
  `/-/reload`) are for the master's own loopback: refused here to everyone.

The answer is the same over HTTP and HTTPS: it depends on the user, never on the port.
"""

from __future__ import annotations

import enum
import re
from urllib.parse import urlsplit

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

MANAGE_PERMISSION = "alerting.manage_alertmanager"
READ_METHODS = frozenset({"GET", "HEAD"})
# Prometheus's reads that also take POST (long queries; Grafana's default).
PROMETHEUS_POST_READS = frozenset(
    {
        "/api/v1/query",
        "/api/v1/query_range",
        "/api/v1/query_exemplars",
        "/api/v1/series",
        "/api/v1/labels",
        "/api/v1/format_query",
        "/api/v1/parse_query",
    }
)
# The health endpoints, open to every user; the rest of /-/ is lifecycle.
HEALTH_PATHS = frozenset({"/-/healthy", "/-/ready"})
_PREFIX = re.compile(r"^/(prometheus|alertmanager)(/.*)$")


class Need(enum.Enum):
    """What a request to a monitoring server needs of the user."""

    READ = "read"
    MANAGE = "manage"
    NEVER = "never"


def classify(server: str, path: str, method: str) -> tuple[Need, str]:
    """(what `method path` on `server` needs, why when it is never allowed)."""
    if path.startswith("/-/"):
        if path in HEALTH_PATHS and method in READ_METHODS:
            return Need.READ, ""
        return Need.NEVER, f"{method} /{server}{path}: lifecycle endpoints are not served here"
    if server == "prometheus":
        if path.startswith("/api/v1/admin/"):
            return Need.NEVER, f"/prometheus{path}: Prometheus's admin API is not served"
        if method in READ_METHODS or (method == "POST" and path in PROMETHEUS_POST_READS):
            return Need.READ, ""
        return Need.NEVER, f"{method} /prometheus{path}: Prometheus is read-only here"
    if path.rstrip("/") in ("/api/v2/status", "/api/v1/status"):
        return Need.MANAGE, ""  # the generated configuration, with the channels' secrets
    if method in READ_METHODS:
        return Need.READ, ""
    if path.startswith("/api/"):
        return Need.MANAGE, ""  # silences, alerts
    return Need.NEVER, f"{method} /alertmanager{path} is not served here"


def _user(request: HttpRequest) -> tuple[AbstractBaseUser | AnonymousUser, bool]:
    """(the user, whether by API token). A bad token is no user, never the session's."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() in ("bearer", "token") and key.strip():
        try:
            user, _token = TokenAuthentication().authenticate_credentials(key.strip())
        except AuthenticationFailed:
            return AnonymousUser(), True
        return user, True
    return request.user, False


def _refuse(reason: str) -> HttpResponse:
    response = HttpResponse(status=403)
    response["X-Mac-Gate"] = reason
    return response


def _cross_site(request: HttpRequest) -> bool:
    """A browser write from another site's page: its Origin names another host."""
    origin = request.headers.get("Origin")
    return bool(origin) and urlsplit(origin).netloc != request.get_host()


@csrf_exempt
def monitoring_gate(request: HttpRequest) -> HttpResponse:
    method = request.headers.get("X-Original-Method", "").upper()
    match = _PREFIX.match(request.headers.get("X-Original-URI", ""))
    if not method or not match:
        return _refuse("the gate answers nginx's subrequests only")
    server, path = match.groups()
    need, why = classify(server, path, method)
    if need is Need.NEVER:
        return _refuse(why)
    user, by_token = _user(request)
    if not user.is_authenticated or not user.is_active:
        return HttpResponse(status=401)
    if need is Need.MANAGE:
        if not user.has_perm(MANAGE_PERMISSION):
            return _refuse(
                f"{method} /{server}{path} needs the permission {MANAGE_PERMISSION} "
                "(an admin grants it)"
            )
        if not by_token and method not in READ_METHODS and _cross_site(request):
            return _refuse("a write from another site's page is refused (Origin)")
    return HttpResponse(status=204)
