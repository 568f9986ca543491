"""Who may use Prometheus and Alertmanager through the front door (issues 22 and 31).

Both servers listen on the master's loopback (or its Compose network) and have no
accounts of their own. nginx serves them under /prometheus/ and /alertmanager/ and
asks this view about every request first (`auth_request`, macweb.nginxconf), passing the
path as it normalised it and the client's method. The answer is 204 (pass), 401 (no
one is logged in) or 403 with the reason in `X-Mac-Gate`, which nginx shows.

The gate is an allow-list (ENDPOINTS): a request passes only when its path, read the
way nginx and the server behind it read it (`normalise`), is exactly one of the listed
endpoints, in one of the methods listed for it. Everything else is refused, whatever
its spelling, whichever server answers /prometheus/ (Prometheus, or in scale-out mode
the targets view in front of VictoriaMetrics, which serves more than Prometheus: its
writes, imports, snapshots and maintenance, under a second `/prometheus` prefix too).

- Reading needs a logged-in user: a session (the dashboard's login) or an API token
  (`Authorization: Bearer <token>` or DRF's `Token <token>`), as a site's Grafana
  sends it. The query endpoints are reads in either method (Grafana POSTs its queries).
- Writing to Alertmanager (silences, posting alerts) and reading its status, which
  holds the generated configuration with the channels' secrets, need the permission
  `alerting.manage_alertmanager` (superusers have it; the admin grants it).
- Nothing writes to the metrics through here, and the lifecycle endpoints of both
  (`/-/quit`, `/-/reload`) are for the master's own loopback: refused to everyone.

The answer is the same over HTTP and HTTPS: it depends on the user, never on the port.
docs/security.md shows the list as a table.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

MANAGE_PERMISSION = "alerting.manage_alertmanager"
SERVERS = ("prometheus", "alertmanager")


class Need(enum.Enum):
    """What a request to a monitoring server needs of the user."""

    READ = "read"
    MANAGE = "manage"
    NEVER = "never"


GET = frozenset({"GET", "HEAD"})
GET_POST = GET | {"POST"}
# One path segment of a name (a label name; VictoriaMetrics allows `.`, `:` and `-` too)
# and of an asset's file; never `.` or `..` alone (normalise has resolved those).
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.:-]*"
_ASSET = rf"{_NAME}(?:/{_NAME})*"
_SILENCE_ID = r"[A-Za-z0-9-]+"


@dataclass(frozen=True)
class Endpoint:
    """One path the gate passes: what each method needs, and what it is (for the docs)."""

    server: str
    path: str  # the path behind the prefix; <name>, <asset>, <id> stand for one part
    methods: dict[str, Need]
    what: str

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        parts = re.split(r"(<name>|<asset>|<id>)", self.path)
        holes = {"<name>": _NAME, "<asset>": _ASSET, "<id>": _SILENCE_ID}
        return re.compile("".join(holes.get(part, re.escape(part)) for part in parts))


def _reads(server: str, methods: frozenset[str], what: str, *paths: str) -> list[Endpoint]:
    return [Endpoint(server, p, dict.fromkeys(methods, Need.READ), what) for p in paths]


# The Prometheus HTTP API's reads (what Grafana's Prometheus data source and the UI ask),
# Prometheus's classic UI (the only one Debian ships) and the targets view's pages.
# Not here, so refused: status/config and /classic/config (a site's scrape credentials
# could be in it), /federate and /api/v1/read (bulk exports), /metrics, /debug/*,
# /-/quit and /-/reload, every write: admin API, remote write, VictoriaMetrics' imports,
# snapshots, /internal/*, /tags/*.
ENDPOINTS: tuple[Endpoint, ...] = (
    *_reads(
        "prometheus", GET_POST, "queries, by GET or POST (Grafana posts them)",
        "/api/v1/query", "/api/v1/query_range", "/api/v1/query_exemplars",
        "/api/v1/series", "/api/v1/labels", "/api/v1/label/<name>/values",
        "/api/v1/format_query",
    ),
    *_reads(
        "prometheus", GET, "metadata, targets, rules, alerts and the server's status",
        "/api/v1/metadata", "/api/v1/targets", "/api/v1/targets/metadata", "/api/v1/rules",
        "/api/v1/alerts", "/api/v1/alertmanagers", "/api/v1/status/buildinfo",
        "/api/v1/status/runtimeinfo", "/api/v1/status/flags", "/api/v1/status/tsdb",
        "/api/v1/status/walreplay",
    ),
    *_reads("prometheus", GET, "health", "/-/healthy", "/-/ready"),
    *_reads(
        "prometheus", GET, "the UI's pages and assets",
        "/", "/graph", "/targets", "/alerts", "/rules", "/classic/", "/classic/graph",
        "/classic/targets", "/classic/alerts", "/classic/rules", "/classic/status",
        "/classic/flags", "/classic/tsdb-status", "/classic/service-discovery",
        "/classic/static/<asset>",
    ),
    *_reads(
        "alertmanager", GET, "alert groups and receivers",
        "/api/v2/alerts/groups", "/api/v2/receivers",
    ),
    Endpoint(
        "alertmanager", "/api/v2/alerts",
        {"GET": Need.READ, "HEAD": Need.READ, "POST": Need.MANAGE}, "alerts; posting one",
    ),
    Endpoint(
        "alertmanager", "/api/v2/silences",
        {"GET": Need.READ, "HEAD": Need.READ, "POST": Need.MANAGE}, "silences; making one",
    ),
    Endpoint(
        "alertmanager", "/api/v2/silence/<id>",
        {"GET": Need.READ, "HEAD": Need.READ, "DELETE": Need.MANAGE}, "a silence; expiring it",
    ),
    # The generated configuration, with the channels' secrets.
    Endpoint(
        "alertmanager", "/api/v2/status", dict.fromkeys(GET, Need.MANAGE),
        "status and configuration",
    ),
    *_reads("alertmanager", GET, "health", "/-/healthy", "/-/ready"),
)  # fmt: skip

_WHO = {Need.READ: "any logged-in user", Need.MANAGE: f"`{MANAGE_PERMISSION}`"}
_METHOD_ORDER = ("GET", "HEAD", "POST", "DELETE")


def markdown_table() -> str:
    """ENDPOINTS as docs/security.md shows them (a test keeps the two the same)."""
    rows: dict[tuple, list[str]] = {}
    for endpoint in ENDPOINTS:
        needs: dict[Need, list[str]] = {}
        for method in sorted(endpoint.methods, key=_METHOD_ORDER.index):
            needs.setdefault(endpoint.methods[method], []).append(method)
        who = "; ".join(f"{'/'.join(methods)}: {_WHO[need]}" for need, methods in needs.items())
        rows.setdefault((endpoint.server, endpoint.what, who), []).append(endpoint.path)
    lines = ["| under | paths | what | methods: who may |", "|---|---|---|---|"]
    for (server, what, who), paths in rows.items():
        shown = ", ".join(f"`{path}`" for path in paths)
        lines.append(f"| `/{server}` | {shown} | {what} | {who} |")
    return "\n".join(lines) + "\n"


# nginx hands over its decoded path: what is left is printable ASCII but for the few
# characters that a server would read again (`%` of an escape made twice, `\`) or that
# end a path (`?`, `#`), and space.
_UNREAD = re.compile(r"[^\x21-\x7e]|[%\\?#]")


def normalise(path: str) -> str | None:
    """`path` as nginx and the server behind it read it (`//` merged, `.` and `..`
    resolved, as nginx does before it passes the request on); None when it cannot be
    read one way only (characters a server could decode again, `..` above the root)."""
    if not path.startswith("/") or _UNREAD.search(path):
        return None
    parts: list[str] = []
    for part in path.split("/")[1:]:
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    trailing = path.endswith("/") or path.rsplit("/", 1)[-1] in (".", "..")
    return "/" + "/".join(parts) + ("/" if trailing and parts else "")


def decide(uri: str, method: str) -> tuple[Need, str]:
    """(what `method uri` needs, why when it is never allowed). `uri` is the path the
    client asked for, /prometheus/... or /alertmanager/..., as nginx decoded it."""
    method = method.upper()
    path = normalise(uri)
    if path is None:
        return Need.NEVER, f"{uri!r} cannot be read one way only (an escape or `..` too many)"
    server, _, rest = path[1:].partition("/")
    if server not in SERVERS or (not rest and not path.endswith("/")):
        return Need.NEVER, f"{path} is not a monitoring server's path"
    inner = "/" + rest
    matched = [e for e in ENDPOINTS if e.server == server and e.pattern.fullmatch(inner)]
    for endpoint in matched:
        if method in endpoint.methods:
            return endpoint.methods[method], ""
    if matched:
        allowed = sorted({m for e in matched for m in e.methods})
        return Need.NEVER, f"{method} {path}: only {', '.join(allowed)} pass here"
    if inner.startswith("/-/"):
        return Need.NEVER, f"{method} {path}: lifecycle endpoints are not served here"
    return Need.NEVER, f"{method} {path} is not one of the reads served here (docs/security.md)"


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
    uri = request.headers.get("X-Original-URI", "")
    if not method or not uri.startswith(tuple(f"/{s}/" for s in SERVERS)):
        return _refuse("the gate answers nginx's subrequests only")
    need, why = decide(uri, method)
    if need is Need.NEVER:
        return _refuse(why)
    user, by_token = _user(request)
    if not user.is_authenticated or not user.is_active:
        return HttpResponse(status=401)
    if need is Need.MANAGE:
        if not user.has_perm(MANAGE_PERMISSION):
            return _refuse(
                f"{method} {uri} needs the permission {MANAGE_PERMISSION} (an admin grants it)"
            )
        if not by_token and method not in GET and _cross_site(request):
            return _refuse("a write from another site's page is refused (Origin)")
    return HttpResponse(status=204)
