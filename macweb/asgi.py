"""ASGI entry point: Django for HTTP, Channels for the dashboard's WebSocket."""

import os

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")
django.setup(set_prefix=False)


class SyncMiddlewareASGIHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain run in sync mode, in one thread hop.

    Every middleware here can run either way, and in async mode Django moves each one's
    sync hooks to the request's thread and back: about fifteen thread hops per request,
    most of the CPU a /health or a registration costs. In sync mode the chain and a sync
    view run in that thread after one hop; an async view (the dashboard's charts) is
    awaited from it on the event loop, holding only that request's own thread.
    """

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


django_asgi_app = SyncMiddlewareASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs apps loaded)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from macweb.routing import MasterOriginValidator, websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": MasterOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
