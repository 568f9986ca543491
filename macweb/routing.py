"""WebSocket routes of the master (the dashboard's live feed), and who may open them.

A browser sends the session cookie with any page's WebSocket, whichever site the page
came from, so a hostile page could read the live feed of a logged-in operator. The
Origin header says which site opened the socket; only the master's own may:

- MAC_ALLOWED_ORIGINS, when set: those origins (scheme://host[:port]) only;
- else the origin must be the socket's own host and port, i.e. the page was served by
  the server the socket goes to (the dashboard opens it at `location.host`), and that
  host one the master answers to (ALLOWED_HOSTS, the master's own names and addresses:
  macweb.hosts; any with MAC_ALLOWED_HOSTS=*). Another port on the master's own name is
  another site (Prometheus' UI, Alertmanager's, a node's exporter), whose pages must not
  read the feed either.

A socket without an Origin header (not opened by a browser page) is refused too.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import path

from macweb.dashboard.consumers import FleetConsumer

websocket_urlpatterns: list = [
    path("ws/fleet/", FleetConsumer.as_asgi()),
]

_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def _origin(text: str) -> tuple[str, str, str] | None:
    """(scheme, host, port) of an origin, the port spelled out; None if unusable."""
    try:
        parts = urlsplit(text.strip().lower())
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not host:
        return None
    return parts.scheme, host, str(port or _DEFAULT_PORTS[parts.scheme])


def origin_allowed(origin: str | None, host_header: str | None) -> bool:
    """Whether a page of `origin` may open a socket sent to `host_header` (see module doc)."""
    parsed = _origin(origin) if origin else None
    if parsed is None:
        return False
    scheme, host, port = parsed
    if settings.ALLOWED_ORIGINS:
        return any(_origin(allowed) == parsed for allowed in settings.ALLOWED_ORIGINS)
    own_host, own_port = split_domain_port((host_header or "").lower())
    own_host = own_host.strip("[]")
    # The socket's port, as the browser sees it: the page's default when Host omits it.
    if not own_host or (host, port) != (own_host, own_port or _DEFAULT_PORTS[scheme]):
        return False
    return validate_host(f"[{host}]" if ":" in host else host, settings.ALLOWED_HOSTS)


class MasterOriginValidator:
    """ASGI middleware: refuse (HTTP 403 at the handshake) a socket from a foreign page."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin")
        host = headers.get(b"host")
        if origin_allowed(
            origin.decode("latin-1") if origin else None,
            host.decode("latin-1") if host else None,
        ):
            return await self.application(scope, receive, send)
        denier = WebsocketDenier()
        return await denier(scope, receive, send)
