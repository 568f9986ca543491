"""ASGI entry point: Django's own handler for HTTP, Channels for the dashboard's WebSocket.

The server behind it is stock: gunicorn with uvicorn's worker (macweb/gunicorn_conf.py),
and in front of both, nginx (macweb/proxy.py) takes the slow clients, the header and
body limits and the connection caps (docs/security.md).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")
# First, as Channels asks: it sets Django up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs apps loaded)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from macweb.routing import MasterOriginValidator, websocket_urlpatterns  # noqa: E402

# Load the URLconf (and the API modules it imports) at start, not in the first request.
get_resolver().url_patterns  # noqa: B018

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": MasterOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
